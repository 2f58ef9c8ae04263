"""PPE 0.9 compatibility of the runtime API: ``to(config=...)``, ``map`` over any callable,
and the callback signatures custom runtimes are written against."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.runtime import BaseRuntime, PyTorchRuntime, forward, get_runtime, map, to


class OptionsRecorder(BaseRuntime):
    def move_module(self, module: torch.nn.Module) -> None:
        return None

    def move_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor


# --------------------------------------------------------------------- to(config=...)


def test_config_is_a_deprecated_alias_of_options() -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.warns(DeprecationWarning, match=r"config=\.\.\.\) is deprecated; use"):
        to(model, "cpu", runtime_class=OptionsRecorder, config={"answer": 42})
    runtime = get_runtime(model)
    assert isinstance(runtime, OptionsRecorder)
    assert runtime.options == {"answer": 42}


def test_config_reaches_pytorch_runtime_validation_like_options() -> None:
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match=r"unknown PyTorchRuntime option\(s\) \['amp'\]"),
    ):
        to(torch.nn.Linear(2, 2), "cpu", config={"amp": True})


def test_config_works_for_tensors_too() -> None:
    with pytest.warns(DeprecationWarning):
        moved = to(torch.ones(2), "cpu", config={})
    torch.testing.assert_close(moved, torch.ones(2))


def test_options_and_config_together_are_rejected_naming_both() -> None:
    with pytest.raises(TypeError, match="got both options and config"):
        to(torch.nn.Linear(2, 2), "cpu", options={}, config={})


# --------------------------------------------------------------------- map over callables


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.linear(x)}

    def embed(self, x: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"z": self.linear(x) * scale, "x": x}


class DoubleRuntime(PyTorchRuntime):
    """CPU, but batches are converted to float64: shows that map went through the runtime."""

    def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.double()

    def convert_batch(self, args: Any) -> Any:
        return {key: value.double() for key, value in args.items()}


def test_map_runs_a_bound_method_through_its_modules_runtime() -> None:
    model = to(Encoder(), "cpu", runtime_class=DoubleRuntime)
    batches = [{"x": torch.randn(4, 3), "scale": torch.tensor(2.0)} for _ in range(2)]
    with torch.no_grad():
        outs = list(map(model.embed, batches, out_keys=["z"]))
    for batch, out in zip(batches, outs):
        assert list(out) == ["z"]
        assert out["z"].dtype == torch.float64  # converted by DoubleRuntime.convert_batch
        torch.testing.assert_close(out["z"], model.linear(batch["x"].double()) * 2)


def test_map_with_a_method_of_an_untagged_module_says_to_call_ppe_to() -> None:
    model = Encoder()
    with pytest.raises(ValueError, match=r"module of Encoder\.embed\(\) moved with ppe\.to"):
        map(model.embed, [])


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ({"a": 1, "b": 2}, 3),  # a dict: keyword arguments
        ((1, 2), 3),  # a tuple: positional arguments
        ([1, 2], 3),  # a list: positional arguments
    ],
)
def test_map_passes_batches_to_a_plain_callable_like_a_code_block(
    batch: Any, expected: int
) -> None:
    def add(a: int, b: int) -> torch.Tensor:
        return torch.tensor(a + b)

    (out,) = map(add, [batch])
    assert out.item() == expected


def test_map_calls_a_plain_callable_lazily_and_moves_outputs() -> None:
    seen: list[torch.Tensor] = []

    def record(x: torch.Tensor) -> dict[str, torch.Tensor]:
        seen.append(x)
        return {"y": x * 2, "ignored": x}

    outs = map(record, (torch.full((2,), float(i)) for i in range(3)), "y", device="meta")
    assert seen == []
    first = next(outs)
    assert len(seen) == 1
    assert list(first) == ["y"]
    assert first["y"].device.type == "meta"
    assert len(list(outs)) == 2


def test_map_accepts_callable_objects_and_lambdas() -> None:
    model = to(Encoder(), "cpu")
    block = forward(model)
    with torch.no_grad():
        (via_lambda,) = map(lambda x: block({"x": x}), [torch.ones(1, 3)], out_keys="y")
        (via_block,) = map(block, [{"x": torch.ones(1, 3)}], out_keys="y")
    torch.testing.assert_close(via_lambda["y"], via_block["y"])


def test_map_rejects_what_is_not_callable() -> None:
    with pytest.raises(
        TypeError, match=r"expects a callable, a torch\.nn\.Module or a CodeBlock, got int"
    ):
        map(3, [])  # type: ignore[arg-type]


# --------------------------------------------------------------------- callback signatures


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("cls", [BaseRuntime, PyTorchRuntime])
def test_post_step_callbacks_receive_the_batch_as_in_ppe(cls: type[BaseRuntime]) -> None:
    assert parameters(cls.train_post_step) == [
        "self", "trainer", "module", "batch_idx", "batch", "outs",
    ]  # fmt: skip
    assert parameters(cls.eval_post_step) == [
        "self", "evaluator", "module", "batch_idx", "batch", "outs",
    ]  # fmt: skip
    assert parameters(cls.train_pre_step) == ["self", "trainer", "module", "batch_idx", "batch"]
    assert parameters(cls.eval_pre_step) == ["self", "evaluator", "module", "batch_idx", "batch"]


def test_to_and_map_signatures_match_ppe() -> None:
    signature = inspect.signature(to)
    assert list(signature.parameters) == [
        "module_or_tensor", "device", "options", "runtime_class", "config",
    ]  # fmt: skip
    keyword_only = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert keyword_only == ["options", "runtime_class", "config"]
    assert all(signature.parameters[name].default is None for name in keyword_only)
    assert str(inspect.signature(map)).startswith(
        "(func: 'Callable[..., Any]', iterable: 'Iterable[Any]', out_keys: "
    )
    assert inspect.signature(map).parameters["device"].default == "cpu"
