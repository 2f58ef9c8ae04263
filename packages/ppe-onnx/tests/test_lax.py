"""lax loops and conditionals: Python control flow in PyTorch, ONNX Loop / If in an export.

Each exported model runs in onnxruntime on inputs other than the export's, where a tracer's
unrolled loop or frozen branch would give other values.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as tou
from pytorch_pfn_extras.onnx import lax


def _export(
    model: nn.Module, args: tuple[torch.Tensor, ...], opset: int | None = None
) -> onnx.ModelProto:
    buffer: Any = io.BytesIO()
    names = [f"in{i}" for i in range(len(args))]
    tou.export(model, args, buffer, input_names=names, opset_version=opset)
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _run(proto: onnx.ModelProto, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    feeds = {f"in{i}": a.numpy() for i, a in enumerate(args)}
    return [np.asarray(out) for out in session.run(None, feeds)]


def _assert_matches(proto: onnx.ModelProto, model: nn.Module, args: Sequence[torch.Tensor]) -> None:
    want = model(*args)
    want = (want,) if isinstance(want, torch.Tensor) else want
    got = _run(proto, args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-5, atol=1e-5)


def _op_types(proto: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in proto.graph.node]


class FixedLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lax.fori_loop(1, 4, lambda i, h: torch.tanh(self.linear(h)) + i, x) * 2


@pytest.mark.parametrize("opset", [11, 17, None])
def test_fori_loop_is_python_in_pytorch_and_a_loop_in_onnx(opset: int | None) -> None:
    model, x = FixedLoop(), torch.randn(2, 4)
    h = x
    for i in range(1, 4):
        h = torch.tanh(model.linear(h)) + i
    torch.testing.assert_close(model(x), h * 2)
    proto = _export(model, (x,), opset)
    assert _op_types(proto).count("Loop") == 1
    assert "Tanh" not in _op_types(proto)  # in the body, not unrolled
    (loop,) = [n for n in proto.graph.node if n.op_type == "Loop"]
    body = onnx.helper.get_attribute_value(loop.attribute[0])
    assert "Tanh" in [n.op_type for n in body.node]
    _assert_matches(proto, model, (torch.randn(2, 4),))


class CountedLoop(nn.Module):
    """A trip count from the data and a tuple of carried values."""

    def forward(
        self, x: torch.Tensor, total: torch.Tensor, lower: torch.Tensor, n: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def body(i: Any, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[Any, Any]:
            h, total = state
            return h * 0.5 + 1, total + i

        return lax.fori_loop(lower, n, body, (x, total))


@pytest.mark.parametrize(("lower", "n"), [(2, 0), (2, 2), (2, 3), (0, 7), (1, 4)])
def test_fori_loop_trip_count_follows_tensor_inputs(lower: int, n: int) -> None:
    model = CountedLoop()
    zero = torch.zeros((), dtype=torch.int64)
    proto = _export(model, (torch.randn(2, 3), zero, torch.tensor(2), torch.tensor(5)))
    assert "Loop" in _op_types(proto)
    args = (torch.randn(2, 3), zero, torch.tensor(lower), torch.tensor(n))
    _assert_matches(proto, model, args)
    assert int(model(*args)[1]) == sum(range(lower, n))


class While(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lax.while_loop(lambda v: v.abs().sum() < 50, lambda v: self.linear(v) * 2 + 1, x)


def test_while_loop_exports_a_loop_with_a_condition_from_the_data() -> None:
    torch.manual_seed(0)
    model = While()
    proto = _export(model, (torch.full((2, 3), 0.1),))
    assert _op_types(proto).count("Loop") == 1
    for scale in (0.01, 1.0, 100.0):  # 100: not a single iteration
        _assert_matches(proto, model, (torch.full((2, 3), scale),))
    assert lax.while_loop(lambda v: v < 10, lambda v: v * 2, 1) == 16


class Cond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return lax.cond(
            x.sum() > 0,
            lambda v: (self.linear(v), v * 2),
            lambda v: (v - 1, v.exp()),
            x,
        )


@pytest.mark.parametrize(("sign", "opset"), [(1.0, None), (-1.0, None), (1.0, 11), (-1.0, 17)])
def test_cond_exports_an_if_choosing_on_the_runtime_input(sign: float, opset: int | None) -> None:
    model = Cond()
    proto = _export(model, (torch.ones(2, 3),), opset)
    assert "If" in _op_types(proto)
    _assert_matches(proto, model, (torch.rand(2, 3) * sign,))


def test_cond_on_a_python_bool_is_plain_python() -> None:
    assert lax.cond(True, lambda a: a + 1, lambda a: a - 1, 1) == 2
    assert lax.cond(False, lambda a: a + 1, lambda a: a - 1, 1) == 0


def test_bad_loop_state_and_bounds_name_the_value() -> None:
    class BadState(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return lax.fori_loop(0, 2, lambda i, v: v, "state")  # type: ignore[arg-type]

    with pytest.raises(TypeError, match=r"init_val must be a tensor.*'state'"):
        _export(BadState(), (torch.ones(1),))
    with pytest.raises(TypeError, match=r"upper must be an int.*2\.5"):
        lax.fori_loop(0, 2.5, lambda i, v: v, torch.ones(1))  # type: ignore[arg-type]

    class Mismatch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return lax.cond(x.sum() > 0, lambda v: v, lambda v: (v, v), x)

    with pytest.raises(ValueError, match="false branch returned 2 tensors where 1 are expected"):
        _export(Mismatch(), (torch.ones(2),))


def test_no_grad_turns_gradients_off_and_exports_the_same_values() -> None:
    linear = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    y = tou.no_grad(linear, x)
    assert not y.requires_grad

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = linear

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return tou.no_grad(self.linear, x) * 2  # type: ignore[no-any-return]

    model = M()
    _assert_matches(_export(model, (x,)), model, (x,))
