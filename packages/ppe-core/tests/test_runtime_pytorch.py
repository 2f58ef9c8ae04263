"""PyTorchRuntime options and batch transfer, BaseRuntime defaults, and ppe.map."""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras.runtime import (
    BaseRuntime,
    CodeBlock,
    PyTorchRuntime,
    call_with_batch,
    forward,
    get_runtime,
    map,
    to,
)

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only machine")


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("options", "names"),
    [({"autocast": True, "amp": 1}, "['amp']"), ({"b": 1, "a": 2}, "['a', 'b']")],
)
def test_unknown_options_are_rejected_by_name(options: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"unknown PyTorchRuntime option(s) {names}")):
        PyTorchRuntime("cpu", options)


@pytest.mark.parametrize(
    "options", [None, {}, {"autocast": False}, {"autocast": {"enabled": False}}]
)
def test_autocast_is_off_by_default_and_when_disabled(options: dict[str, Any] | None) -> None:
    runtime = PyTorchRuntime("cpu", options)
    with runtime.autocast():
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize(
    ("option", "dtype"),
    [
        (True, torch.bfloat16),
        ({"dtype": torch.bfloat16}, torch.bfloat16),
        ({"device_type": "cpu", "dtype": torch.float16}, torch.float16),
    ],
)
def test_autocast_on_cpu_runs_matmuls_in_the_requested_dtype(
    option: Any, dtype: torch.dtype
) -> None:
    model = to(torch.nn.Linear(4, 2), "cpu", options={"autocast": option})
    out = forward(model)(torch.randn(3, 4))
    assert out.dtype == dtype
    assert model.weight.dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")  # the context was left


def test_autocast_with_a_dtype_the_cpu_cannot_use_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"cannot be used on device 'cpu'.*only supports"):
        PyTorchRuntime("cpu", {"autocast": {"dtype": torch.float64}})


@needs_no_cuda
@pytest.mark.parametrize("option", [True, {"dtype": torch.float16}])
def test_cuda_autocast_without_cuda_is_an_error(option: Any) -> None:
    with pytest.raises(
        ValueError, match=r"cannot be used on device 'cuda:0'.*CUDA is not available"
    ):
        PyTorchRuntime("cuda:0", {"autocast": option})


def test_autocast_for_another_device_type_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"device_type 'cuda' does not match the runtime's device 'cpu'"
    ):
        to(torch.nn.Linear(1, 1), "cpu", options={"autocast": {"device_type": "cuda"}})


@pytest.mark.parametrize(
    ("option", "error", "match"),
    [
        ("yes", TypeError, "must be a bool or a dict.*got str"),
        ({"fast_dtype": torch.bfloat16}, ValueError, "invalid 'autocast' option"),
    ],
)
def test_malformed_autocast_options_are_rejected(
    option: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PyTorchRuntime("cpu", {"autocast": option})


@needs_no_cuda
def test_a_cuda_grad_scaler_on_a_cpu_runtime_is_an_error() -> None:
    with pytest.warns(UserWarning, match="CUDA is not available"):  # torch's own warning
        scaler = torch.amp.GradScaler("cuda")
    with pytest.raises(ValueError, match=r"created for device type 'cuda'.*GradScaler\('cpu'\)"):
        to(torch.nn.Linear(1, 1), "cpu", options={"grad_scaler": scaler})


@pytest.mark.parametrize("scaler", [object(), 2.0, torch.optim.SGD])
def test_an_object_that_is_not_a_grad_scaler_is_rejected(scaler: Any) -> None:
    with pytest.raises(TypeError, match=r"must be a torch\.amp\.GradScaler"):
        PyTorchRuntime("cpu", {"grad_scaler": scaler})


def test_a_cpu_grad_scaler_is_accepted_on_a_cpu_runtime() -> None:
    scaler = torch.amp.GradScaler("cpu")
    runtime = PyTorchRuntime(torch.device("cpu"), {"grad_scaler": scaler, "autocast": True})
    assert runtime.grad_scaler is scaler
    assert PyTorchRuntime("cpu", {}).grad_scaler is None


@pytest.mark.parametrize("device_spec", [0, None, ["cpu"]])
def test_runtimes_reject_device_specs_of_the_wrong_type(device_spec: Any) -> None:
    with pytest.raises(TypeError, match=r"device_spec must be a str or torch\.device"):
        PyTorchRuntime(device_spec, {})


def test_runtimes_reject_options_that_are_not_a_mapping() -> None:
    with pytest.raises(TypeError, match="options must be a mapping, got list"):
        BaseRuntime("cpu", [("autocast", True)])  # type: ignore[arg-type]


# ------------------------------------------------------------- batch transfer


class Pair(NamedTuple):
    x: torch.Tensor
    label: str


def test_convert_batch_moves_nested_tensors_and_keeps_the_structure() -> None:
    runtime = PyTorchRuntime("meta", {})
    batch: dict[str, Any] = {
        "x": torch.ones(2),
        "seq": [torch.zeros(1), (torch.ones(3), 7)],
        "pair": Pair(torch.ones(1), "a"),
        "ordered": collections.OrderedDict(y=torch.ones(1)),
        "counts": collections.Counter(a=1),
        "name": "batch-0",
    }
    out = runtime.convert_batch(batch)
    assert out["x"].device.type == "meta"
    assert isinstance(out["seq"], list)
    assert isinstance(out["seq"][1], tuple)
    assert out["seq"][1][0].device.type == "meta"
    assert out["seq"][1][1] == 7
    assert isinstance(out["pair"], Pair)
    assert out["pair"].x.device.type == "meta"
    assert out["pair"].label == "a"
    assert isinstance(out["ordered"], collections.OrderedDict)
    assert out["ordered"]["y"].device.type == "meta"
    assert out["counts"] == collections.Counter(a=1)
    assert out["name"] == "batch-0"
    assert batch["x"].device.type == "cpu"


def test_convert_batch_returns_tensors_already_on_the_device_as_is() -> None:
    tensor = torch.ones(2)
    assert PyTorchRuntime("cpu", {}).convert_batch({"x": tensor})["x"] is tensor


_leaves = st.one_of(st.integers(), st.text(max_size=3), st.builds(torch.randn, st.integers(0, 3)))
_batches = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
    ),
    max_leaves=10,
)


def _structure(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), obj.dtype)
    if isinstance(obj, Mapping):
        return {key: _structure(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_structure(value) for value in obj)
    return obj


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [tensor for value in obj for tensor in _tensors(value)]
    return []


@settings(max_examples=50, deadline=None)
@given(_batches)
def test_convert_batch_preserves_any_nested_batch(batch: Any) -> None:
    out = PyTorchRuntime("meta", {}).convert_batch(batch)
    assert _structure(out) == _structure(batch)
    assert all(tensor.device.type == "meta" for tensor in _tensors(out))


# ------------------------------------------------------------- BaseRuntime


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("convert_batch", ({},)),
        ("move_module", (torch.nn.Linear(1, 1),)),
        ("move_tensor", (torch.ones(1),)),
        ("execute", (None, {})),
    ],
)
def test_base_runtime_device_methods_name_the_missing_implementation(
    method: str, args: tuple[Any, ...]
) -> None:
    class Bare(BaseRuntime):
        pass

    with pytest.raises(NotImplementedError, match=rf"Bare does not implement {method}\(\)"):
        getattr(Bare("dev", {}), method)(*args)


def test_base_runtime_callbacks_accept_the_documented_arguments_and_do_nothing() -> None:
    runtime = BaseRuntime("dev", None)
    module = torch.nn.Linear(1, 1)
    before = {key: value.clone() for key, value in module.state_dict().items()}
    runtime.initialize_module(module, [torch.ones(1)], optimizer=None)
    runtime.train_epoch_begin(module)
    runtime.train_pre_step(trainer=None, module=module, batch_idx=0, batch={})
    runtime.train_post_step(trainer=None, module=module, batch_idx=0, batch={}, outs={})
    runtime.train_validation_begin(module)
    runtime.eval_pre_step(evaluator=None, module=module, batch_idx=0, batch={})
    runtime.eval_post_step(evaluator=None, module=module, batch_idx=0, batch={}, outs={})
    runtime.train_validation_end(module)
    runtime.train_epoch_end(module)
    runtime.train_cleanup(module)
    torch.testing.assert_close(module.state_dict(), before)
    assert runtime.device_spec == "dev"
    assert runtime.options == {}


def test_trace_is_a_reusable_context_manager_on_the_class_and_instances() -> None:
    with (
        BaseRuntime.trace("ppe.step", {"x": 1}),
        PyTorchRuntime("cpu", {}).trace("outer", None),
        BaseRuntime.trace(None, None),
    ):
        pass

    events: list[str] = []

    class Traced(BaseRuntime):
        @classmethod
        def trace(cls, event_name: str | None, arg: Any) -> Any:
            events.append(f"{event_name}")
            return super().trace(event_name, arg)

    with Traced.trace("step", None):
        pass
    assert events == ["step"]


# --------------------------------------------------------------------- map


class DictModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.linear(x)
        return {"y": y, "norm": y.norm(), "x": x}


def test_map_applies_the_module_to_each_batch_and_keeps_only_out_keys() -> None:
    model = to(DictModel(), "cpu")
    batches = [{"x": torch.randn(2, 3)} for _ in range(3)]
    outs = list(map(model, batches, out_keys=["y"]))
    assert [list(out) for out in outs] == [["y"]] * 3
    for batch, out in zip(batches, outs):
        torch.testing.assert_close(out["y"], model.linear(batch["x"]))


def test_map_without_out_keys_returns_whole_outputs_on_the_device() -> None:
    model = to(DictModel(), "cpu")
    (out,) = map(model, [{"x": torch.randn(1, 3)}], device="meta")
    assert set(out) == {"y", "norm", "x"}
    assert all(value.device.type == "meta" for value in out.values())


def test_map_is_lazy() -> None:
    model = to(DictModel(), "cpu")
    seen: list[int] = []

    def batches() -> Any:
        for i in range(3):
            seen.append(i)
            yield {"x": torch.randn(1, 3)}

    outs = map(model, batches(), out_keys="norm")
    assert seen == []
    next(outs)
    assert seen == [0]


def test_map_accepts_a_code_block() -> None:
    model = to(DictModel(), "cpu")
    block = forward(model)
    (out,) = map(block, [(torch.ones(1, 3),)], out_keys=("norm",))
    torch.testing.assert_close(out["norm"], model.linear(torch.ones(1, 3)).norm())


def test_map_names_missing_out_keys() -> None:
    model = to(DictModel(), "cpu")
    with pytest.raises(
        KeyError, match=r"no key\(s\) \['z'\]; available keys: \['y', 'norm', 'x'\]"
    ):
        list(map(model, [{"x": torch.randn(1, 3)}], out_keys=["y", "z"]))


def test_map_with_out_keys_needs_mapping_outputs() -> None:
    model = to(torch.nn.Linear(3, 1), "cpu")
    with pytest.raises(TypeError, match="outputs that are mappings, got Tensor"):
        list(map(model, [torch.randn(1, 3)], out_keys=["y"]))


def test_map_rejects_non_string_out_keys() -> None:
    model = to(DictModel(), "cpu")
    with pytest.raises(TypeError, match=r"out_keys must be strings, got \[0\]"):
        map(model, [], out_keys=[0])  # type: ignore[list-item]


def test_map_needs_a_module_moved_with_ppe_to() -> None:
    with pytest.raises(ValueError, match=r"forward\(\) needs a module moved with ppe.to"):
        map(DictModel(), [])


def test_map_dispatches_to_the_runtime_of_the_module() -> None:
    class PrefetchingRuntime(PyTorchRuntime):
        def map(
            self,
            func: Any,
            iterable: Any,
            out_keys: Any = None,
            device: str | torch.device = "cpu",
        ) -> Any:
            items = list(iterable)  # "submit" everything, then collect
            return iter([("prefetched", out) for out in super().map(func, items, out_keys, device)])

    model = to(DictModel(), "cpu", runtime_class=PrefetchingRuntime)
    outs = list(map(model, [{"x": torch.ones(1, 3)}] * 2, out_keys=["y"]))
    assert [tag for tag, _ in outs] == ["prefetched", "prefetched"]
    assert isinstance(get_runtime(model), PrefetchingRuntime)
    assert isinstance(forward(model), CodeBlock)


def _arguments(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


_PAIR = Pair(torch.ones(1), "a")


@pytest.mark.parametrize(
    ("batch", "args", "kwargs"),
    [
        ({"x": 1, "t": 2}, (), {"x": 1, "t": 2}),
        (collections.OrderedDict(x=1), (), {"x": 1}),
        ((1, 2), (1, 2), {}),
        ([1, 2], (1, 2), {}),
        (_PAIR, (_PAIR.x, "a"), {}),  # a named tuple is a tuple
        ("batch", ("batch",), {}),
    ],
)
def test_call_with_batch_passes_a_batch_as_ppe_map_does(
    batch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    got_args, got_kwargs = call_with_batch(_arguments, batch)
    assert len(got_args) == len(args) and all(g is e for g, e in zip(got_args, args))
    assert got_kwargs == kwargs
    (mapped,) = map(_arguments, [batch])  # a plain callable: ppe.map passes the batch alike
    assert len(mapped[0]) == len(args) and all(g is e for g, e in zip(mapped[0], args))
    assert mapped[1] == kwargs


def test_a_runtime_of_your_own_runs_code_blocks_with_call_with_batch() -> None:
    class CallingRuntime(PyTorchRuntime):
        def execute(self, code_block: Any, batch: Any) -> Any:
            return call_with_batch(code_block.func, self.convert_batch(batch))

    model = to(DictModel(), "cpu", runtime_class=CallingRuntime)
    x = torch.ones(1, 3)
    out = forward(model)({"x": x})
    torch.testing.assert_close(out["y"], model.linear(x))
