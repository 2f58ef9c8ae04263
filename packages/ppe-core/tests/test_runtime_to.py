"""ppe.to, the module -> runtime tag, and the runtime registry."""

from __future__ import annotations

import copy
import gc
import io
import pickle
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy
import pytest
import torch

from pytorch_pfn_extras.runtime import (
    BaseRuntime,
    PyTorchRuntime,
    get_runtime,
    named_runtime_modules,
    runtime_registry,
    to,
)


def make_model() -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )


class Float64Runtime(BaseRuntime):
    """A "device" that stores everything in float64: observable without hardware."""

    def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.double()

    def move_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.double()


class LockedRuntime(PyTorchRuntime):
    """A runtime holding an unpicklable object (as device handles often are)."""

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any]) -> None:
        super().__init__("cpu", options)
        self.handle = threading.Lock()


def test_to_moves_a_module_and_tags_every_submodule_with_one_runtime() -> None:
    model = make_model()
    moved = to(model, "cpu")
    assert moved is model
    runtimes = {id(get_runtime(module)) for module in model.modules()}
    assert len(runtimes) == 1
    runtime = get_runtime(model)
    assert isinstance(runtime, PyTorchRuntime)
    assert runtime.device == torch.device("cpu")


def test_to_on_the_meta_device_moves_parameters_there() -> None:
    model = to(make_model(), torch.device("meta"))
    assert {param.device.type for param in model.parameters()} == {"meta"}
    assert to(torch.ones(2), "meta").device.type == "meta"


def test_to_moves_a_tensor_through_the_runtime_without_changing_it() -> None:
    tensor = torch.arange(3.0)
    assert torch.equal(to(tensor, "cpu"), tensor)
    moved = to(tensor, "cpu", runtime_class=Float64Runtime)
    assert moved.dtype == torch.float64
    assert moved.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("obj", "type_name"),
    [([torch.ones(1)], "list"), (numpy.ones(2), "numpy.ndarray"), (3, "int"), (None, "NoneType")],
)
def test_to_rejects_objects_that_are_neither_modules_nor_tensors(obj: Any, type_name: str) -> None:
    with pytest.raises(ValueError, match=rf"torch.nn.Module or a torch.Tensor, got {type_name}"):
        to(obj, "cpu")


def test_to_rejects_a_runtime_class_that_is_not_a_base_runtime() -> None:
    with pytest.raises(TypeError, match="subclass of BaseRuntime, got <class 'object'>"):
        to(torch.ones(1), "cpu", runtime_class=object)  # type: ignore[arg-type]


def test_to_with_an_unknown_device_type_names_it_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"'nodev:0' is not a PyTorch device.*'nodev'.*register"):
        to(make_model(), "nodev:0")


def test_to_again_retags_the_module_with_the_new_runtime() -> None:
    model = to(make_model(), "cpu")
    first = get_runtime(model)
    to(model, "cpu", options={"autocast": False})
    assert get_runtime(model) is not first
    assert get_runtime(next(iter(model[2].children()))) is get_runtime(model)


def test_a_module_replaced_by_move_module_is_tagged_and_returned() -> None:
    class WrappingRuntime(PyTorchRuntime):
        def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
            return torch.nn.Sequential(module, torch.nn.Identity())

    inner = torch.nn.Linear(2, 2)
    wrapped = to(inner, "cpu", runtime_class=WrappingRuntime)
    assert isinstance(wrapped, torch.nn.Sequential)
    assert wrapped[0] is inner
    runtime = get_runtime(inner)
    assert isinstance(runtime, WrappingRuntime)
    assert all(get_runtime(module) is runtime for module in wrapped.modules())
    assert [name for name, _ in named_runtime_modules(wrapped)] == [""]


def test_untagged_modules_have_no_runtime() -> None:
    assert get_runtime(make_model()) is None


@pytest.mark.parametrize(
    "clone",
    [
        copy.deepcopy,
        lambda m: pickle.loads(pickle.dumps(m)),
        lambda m: _torch_save_load(m),
    ],
    ids=["deepcopy", "pickle", "torch.save"],
)
def test_the_runtime_tag_is_not_carried_by_copies(clone: Any) -> None:
    model = to(make_model(), "cpu", runtime_class=LockedRuntime)  # the runtime is unpicklable
    copied = clone(model)
    assert all(get_runtime(module) is None for module in copied.modules())
    assert isinstance(get_runtime(model), LockedRuntime)  # the original keeps its tag
    assert all(vars(module).get("_ppe_runtime") is None for module in copied.modules())
    torch.testing.assert_close(copied.state_dict(), model.state_dict())


def _torch_save_load(module: torch.nn.Module) -> torch.nn.Module:
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded: torch.nn.Module = torch.load(buffer, weights_only=False)
    return loaded


def test_the_runtime_tag_leaves_the_state_dict_unchanged() -> None:
    torch.manual_seed(0)
    plain = make_model()
    tagged = to(copy.deepcopy(plain), "cpu")
    assert list(tagged.state_dict()) == list(plain.state_dict())
    assert vars(tagged).keys() - vars(plain).keys() == {"_ppe_runtime"}


def test_the_runtime_tag_does_not_keep_modules_alive() -> None:
    model = to(make_model(), "cpu")
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_modules_that_override_equality_are_tagged_by_identity() -> None:
    class EqualToAll(torch.nn.Linear):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 0

    first, second = EqualToAll(2, 2), EqualToAll(2, 2)
    to(first, "cpu")
    assert get_runtime(first) is not None
    assert get_runtime(second) is None


def test_named_runtime_modules_yields_each_runtime_subtree_once() -> None:
    model = make_model()
    model.add_module("shared", model[0])
    to(model, "cpu")
    assert [name for name, _ in named_runtime_modules(model)] == [""]
    to(model[2], "meta")
    assert [(name, module) for name, module in named_runtime_modules(model)] == [
        ("", model),
        ("2", model[2]),
    ]


def test_named_runtime_modules_finds_tagged_children_of_an_untagged_root() -> None:
    root = torch.nn.ModuleDict({"a": torch.nn.Linear(1, 1), "b": torch.nn.Linear(1, 1)})
    to(root["b"], "cpu")
    assert [name for name, _ in named_runtime_modules(root)] == ["b"]


# ------------------------------------------------------------------ registry


class MyRuntime(Float64Runtime):
    pass


@pytest.mark.parametrize("device", ["ppe-test-mydev", "ppe-test-mydev:1"])
def test_registered_runtime_is_used_for_every_device_of_its_type(device: str) -> None:
    runtime_registry.register("ppe-test-mydev", MyRuntime)
    model = to(torch.nn.Linear(2, 2), device, options={"flag": 1})
    runtime = get_runtime(model)
    assert isinstance(runtime, MyRuntime)
    assert runtime.device_spec == device
    assert runtime.options == {"flag": 1}
    assert model.weight.dtype == torch.float64


def test_registering_a_device_type_again_replaces_its_class() -> None:
    runtime_registry.register("ppe-test-twice", MyRuntime)
    runtime_registry.register("ppe-test-twice", Float64Runtime)
    assert runtime_registry.get_runtime_class_for_device_spec("ppe-test-twice:0") is Float64Runtime


@pytest.mark.parametrize("device", ["cpu", "cuda:0", torch.device("cpu"), "meta"])
def test_unregistered_device_types_use_the_pytorch_runtime(device: str | torch.device) -> None:
    assert runtime_registry.get_runtime_class_for_device_spec(device) is PyTorchRuntime


def test_an_explicit_runtime_class_overrides_the_registry() -> None:
    model = to(torch.nn.Linear(1, 1), "cpu", runtime_class=MyRuntime)
    assert type(get_runtime(model)) is MyRuntime


@pytest.mark.parametrize("device_type", ["", "mydev:0", 3])
def test_register_rejects_bad_device_types(device_type: Any) -> None:
    with pytest.raises(ValueError, match="device type without ':'"):
        runtime_registry.register(device_type, MyRuntime)


@pytest.mark.parametrize("runtime_class", [object, MyRuntime("cpu", {}), "MyRuntime"])
def test_register_rejects_classes_that_are_not_runtimes(runtime_class: Any) -> None:
    with pytest.raises(TypeError, match="subclass of BaseRuntime"):
        runtime_registry.register("ppe-test-bad", runtime_class)


def test_lookup_rejects_a_device_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"str or torch\.device, got int"):
        runtime_registry.get_runtime_class_for_device_spec(0)  # type: ignore[arg-type]


# --------------------------------------------- the guide's custom-device example


class MagicDeviceRuntime(BaseRuntime):
    """The reference guide's MyMagicDeviceRuntime, with a "device" that is a
    float64 copy of the module run by a function of the runtime."""

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any]) -> None:
        super().__init__(device_spec, options)
        self.initialized: list[tuple[int, Any]] = []
        self.device_params: dict[str, torch.Tensor] = {}

    def _device_forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self.device_params
        return torch.nn.functional.linear(x.double(), params["weight"], params["bias"]).float()

    def move_module(self, module: torch.nn.Module) -> None:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            runtime = get_runtime(module)
            assert runtime is not None
            if not self.initialized:
                runtime.initialize_module(module, args)

        self.hook = module.register_forward_pre_hook(hook)
        module.forward = self._device_forward

    def initialize_module(
        self,
        module: torch.nn.Module,
        loader_or_batch: Any,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.initialized.append((id(module), loader_or_batch))
        self.device_params = {
            name: param.detach().double().clone() for name, param in module.named_parameters()
        }


def test_custom_device_runtime_initializes_on_first_batch_and_runs_the_device_forward() -> None:
    runtime_registry.register("ppe-test-magic", MagicDeviceRuntime)
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    expected_model = copy.deepcopy(module).double()
    returned = to(module, device="ppe-test-magic")
    assert returned is module  # move_module returned None: the module was changed in place
    runtime = get_runtime(module)
    assert isinstance(runtime, MagicDeviceRuntime)
    batches = [torch.randn(4, 3) for _ in range(3)]
    outputs = [module(x) for x in batches]
    assert len(runtime.initialized) == 1
    assert runtime.initialized[0][0] == id(module)
    assert torch.equal(runtime.initialized[0][1][0], batches[0])
    for x, y in zip(batches, outputs):
        assert y.dtype == torch.float32
        torch.testing.assert_close(y, expected_model(x.double()).float())
