"""The ``module._ppe_runtime`` attribute: what published-PPE code reads and writes.

torch types ``nn.Module.__getattr__`` as returning ``Tensor | Module``, so mypy
rejects ``module._ppe_runtime.initialize_module(...)``; this file exercises that
untyped style on purpose (typed code calls ``get_runtime(module)``).
"""

# mypy: disable-error-code="union-attr, operator, comparison-overlap, assignment"

from __future__ import annotations

import copy
import gc
import io
import pickle
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.runtime import (
    BaseRuntime,
    PyTorchRuntime,
    forward,
    get_runtime,
    named_runtime_modules,
    runtime_registry,
    to,
    update_parameters,
)


def make_model() -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )


class LockedRuntime(PyTorchRuntime):
    """A runtime holding an unpicklable object, as device handles often are."""

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any]) -> None:
        super().__init__(device_spec, options)
        self.handle = threading.Lock()


class PicklableRuntime(PyTorchRuntime):
    """Opts back into pickling, as ``BaseRuntime``'s docstring tells subclasses to."""

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (type(self), (self.device_spec, self.options))


def _torch_save_load(obj: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _pickle_round_trip(protocol: int) -> Callable[[Any], Any]:
    return lambda obj: pickle.loads(pickle.dumps(obj, protocol=protocol))


CLONES: dict[str, Callable[[Any], Any]] = {
    "deepcopy": copy.deepcopy,
    **{
        f"pickle-protocol-{protocol}": _pickle_round_trip(protocol)
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
    },
    "torch.save": _torch_save_load,
}


def test_every_tagged_submodule_exposes_the_runtime_as_ppe_runtime() -> None:
    model = to(make_model(), "cpu", options={"autocast": False})
    runtime = get_runtime(model)
    assert isinstance(runtime, PyTorchRuntime)
    for module in model.modules():
        assert module._ppe_runtime is runtime
        assert isinstance(module._ppe_runtime, BaseRuntime)
    assert model[0]._ppe_runtime.device == torch.device("cpu")
    assert model[0]._ppe_runtime.options == {"autocast": False}
    moved = model[2]._ppe_runtime.move_tensor(torch.ones(2, dtype=torch.float64))
    assert torch.equal(moved, torch.ones(2, dtype=torch.float64))
    assert "_ppe_runtime" in dir(model)


def test_the_tag_is_neither_a_parameter_a_buffer_a_submodule_nor_state() -> None:
    torch.manual_seed(0)
    model = to(make_model(), "cpu")
    assert "_ppe_runtime" not in dict(model.named_modules())
    assert not any("_ppe_runtime" in name for name, _ in model.named_parameters())
    assert not any("_ppe_runtime" in name for name, _ in model.named_buffers())
    assert not any("_ppe_runtime" in key for key in model.state_dict())
    fresh = make_model()
    fresh.load_state_dict(model.state_dict())
    assert get_runtime(fresh) is None
    torch.testing.assert_close(fresh.state_dict(), model.state_dict())


def test_an_untagged_module_has_no_ppe_runtime() -> None:
    model = make_model()
    assert get_runtime(model) is None
    assert not hasattr(model, "_ppe_runtime")


class ReferenceGuideRuntime(BaseRuntime):
    """The reference guide's ``MyMagicDeviceRuntime``, its hook reading ``_ppe_runtime``.

    Its "device" is a float64 copy of the parameters that the first batch builds.
    """

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any]) -> None:
        super().__init__(device_spec, options)
        self.initialized_with: list[tuple[torch.nn.Module, Any]] = []
        self.device_params: dict[str, torch.Tensor] = {}

    def _device_forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self.device_params
        return torch.nn.functional.linear(x.double(), params["weight"], params["bias"]).float()

    def move_module(self, module: torch.nn.Module) -> None:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            if not module._ppe_runtime.device_params:
                module._ppe_runtime.initialize_module(module, args)

        self.hook = module.register_forward_pre_hook(hook)
        module.forward = self._device_forward

    def initialize_module(
        self,
        module: torch.nn.Module,
        loader_or_batch: Any,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.initialized_with.append((module, loader_or_batch))
        self.device_params = {
            name: param.detach().double().clone() for name, param in module.named_parameters()
        }


def test_reference_guide_hook_reading_ppe_runtime_initializes_on_the_first_batch() -> None:
    runtime_registry.register("ppe-test-tag-guide", ReferenceGuideRuntime)
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    reference = copy.deepcopy(module).double()
    assert to(module, device="ppe-test-tag-guide") is module
    batches = [torch.randn(4, 3) for _ in range(3)]
    outputs = [module(x) for x in batches]
    runtime = module._ppe_runtime
    assert isinstance(runtime, ReferenceGuideRuntime)
    assert len(runtime.initialized_with) == 1
    initialized_module, args = runtime.initialized_with[0]
    assert initialized_module is module
    assert torch.equal(args[0], batches[0])
    for x, y in zip(batches, outputs):
        torch.testing.assert_close(y, reference(x.double()).float())


class SquaredOutput(torch.nn.Module):
    """A one-layer model whose forward returns its loss (``mean(y ** 2)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.linear(x)
        return y.pow(2).mean()


def test_assigning_ppe_runtime_directly_tags_the_module_for_codeblocks() -> None:
    torch.manual_seed(0)
    model = SquaredOutput()
    reference = copy.deepcopy(model)
    runtime = PyTorchRuntime("cpu", {})
    model._ppe_runtime = runtime  # the published PPE's way of tagging
    assert get_runtime(model) is runtime
    assert get_runtime(model.linear) is None  # only what was assigned
    assert [name for name, _ in named_runtime_modules(model)] == [""]

    x = torch.randn(5, 3)
    torch.testing.assert_close(forward(model)(x), reference(x))
    step = update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert step.runtime is runtime
    loss = step(x)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference_loss = reference(x)
    reference_loss.backward()
    reference_optimizer.step()
    torch.testing.assert_close(loss, reference_loss.detach())
    torch.testing.assert_close(model.state_dict(), reference.state_dict())


@pytest.mark.parametrize("value", [None, "cpu", 3, object()], ids=["None", "str", "int", "object"])
def test_a_ppe_runtime_value_that_is_not_a_runtime_means_untagged(value: object) -> None:
    model = to(make_model(), "cpu")
    model._ppe_runtime = value
    assert get_runtime(model) is None
    assert get_runtime(model[0]) is not None  # the submodules keep their own tags
    assert [name for name, _ in named_runtime_modules(model)] == ["0", "1", "2"]
    with pytest.raises(ValueError, match=r"needs a module moved with ppe\.to"):
        forward(model)


def test_deleting_ppe_runtime_untags_the_module() -> None:
    model = to(torch.nn.Linear(2, 2), "cpu")
    del model._ppe_runtime
    assert get_runtime(model) is None
    assert not hasattr(model, "_ppe_runtime")


def test_a_module_whose_setattr_rejects_attributes_is_still_tagged() -> None:
    class Frozen(torch.nn.Linear):
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "_ppe_runtime":
                message = f"{type(self).__name__} is frozen, cannot set {name}"
                raise AttributeError(message)
            super().__setattr__(name, value)

    model = torch.nn.Sequential(Frozen(2, 2))
    to(model, "cpu")
    assert model[0]._ppe_runtime is get_runtime(model) is not None


@pytest.mark.parametrize("clone", list(CLONES.values()), ids=list(CLONES))
def test_copies_of_a_tagged_module_are_untagged_with_ppe_runtime_none(
    clone: Callable[[Any], Any],
) -> None:
    torch.manual_seed(0)
    model = to(make_model(), "cpu", runtime_class=LockedRuntime)  # unpicklable runtime
    copied = clone(model)
    for module in copied.modules():
        assert get_runtime(module) is None
        assert vars(module).get("_ppe_runtime") is None
    assert isinstance(model[0]._ppe_runtime, LockedRuntime)  # the original keeps its tag
    torch.testing.assert_close(copied.state_dict(), model.state_dict())
    x = torch.randn(2, 3)
    torch.testing.assert_close(copied(x), model(x))


def test_a_pickled_tagged_module_references_no_ppe_code() -> None:
    model = to(make_model(), "cpu")
    payload = pickle.dumps(model)
    assert b"pytorch_pfn_extras" not in payload
    assert b"PyTorchRuntime" not in payload


def test_an_unpickled_module_can_be_tagged_again() -> None:
    torch.manual_seed(0)
    original = to(make_model(), "cpu")
    restored = to(pickle.loads(pickle.dumps(original)), "cpu")
    assert isinstance(restored._ppe_runtime, PyTorchRuntime)
    assert restored._ppe_runtime is not original._ppe_runtime
    x = torch.randn(4, 3)
    torch.testing.assert_close(forward(restored)(x), original(x))


@pytest.mark.parametrize("clone", [copy.copy, *CLONES.values()], ids=["copy", *CLONES])
def test_a_runtime_alone_pickles_and_copies_to_none(clone: Callable[[Any], Any]) -> None:
    assert clone(LockedRuntime("cpu", {})) is None


@pytest.mark.parametrize("clone", list(CLONES.values()), ids=list(CLONES))
def test_a_runtime_that_opts_into_pickling_travels_with_copies(
    clone: Callable[[Any], Any],
) -> None:
    model = to(make_model(), "cpu", options={"autocast": False}, runtime_class=PicklableRuntime)
    copied = clone(model)
    runtime = get_runtime(copied)
    assert isinstance(runtime, PicklableRuntime)
    assert runtime is not get_runtime(model)
    assert runtime.options == {"autocast": False}
    assert all(module._ppe_runtime is runtime for module in copied.modules())  # still shared


def test_a_shallow_copy_shares_the_runtime_like_it_shares_the_submodules() -> None:
    model = to(make_model(), "cpu")
    shallow = copy.copy(model)
    assert shallow._ppe_runtime is model._ppe_runtime
    assert shallow[0] is model[0]


@pytest.mark.parametrize(
    "convert",
    [
        lambda m: m.to(torch.float64),
        lambda m: m.double(),
        lambda m: m.eval(),
        lambda m: m.requires_grad_(False),
        lambda m: m.apply(lambda _: None),
    ],
    ids=["to-dtype", "double", "eval", "requires_grad_", "apply"],
)
def test_module_conversions_keep_the_tag(convert: Callable[[torch.nn.Module], Any]) -> None:
    model = to(make_model(), "cpu")
    runtime = get_runtime(model)
    convert(model)
    assert all(module._ppe_runtime is runtime for module in model.modules())


def test_a_tagged_module_is_freed_without_the_cycle_collector() -> None:
    model = to(make_model(), "cpu")
    refs = [weakref.ref(module) for module in model.modules()]
    runtime_ref = weakref.ref(model._ppe_runtime)
    gc.disable()
    try:
        del model
        assert all(ref() is None for ref in refs)
        assert runtime_ref() is None
    finally:
        gc.enable()


def test_a_tagged_module_referenced_by_its_runtime_is_collected() -> None:
    class HoldingRuntime(PyTorchRuntime):
        def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
            self.module = module  # a cycle: module -> runtime -> module
            return super().move_module(module)

    model = to(make_model(), "cpu", runtime_class=HoldingRuntime)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
