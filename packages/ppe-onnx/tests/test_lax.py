"""lax loops and conditionals compute what Python control flow computes, exported or not."""

from __future__ import annotations

import io
from typing import Any, cast

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as tou
from pytorch_pfn_extras.onnx import lax

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _export_and_run(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    buffer: Any = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, dynamo=False)
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    return out  # type: ignore[no-any-return]


class Loop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lax.fori_loop(0, 3, lambda i, h: torch.tanh(self.linear(h)) + i, x)


class Cond(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, x)


def test_fori_loop_matches_python_and_onnxruntime() -> None:
    model, x = Loop(), torch.randn(2, 4)
    h = x
    for i in range(3):
        h = torch.tanh(model.linear(h)) + i
    torch.testing.assert_close(model(x), h)
    np.testing.assert_allclose(_export_and_run(model, x), h.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_exports_a_choice_made_on_the_runtime_input(sign: float) -> None:
    x = torch.ones(2, 3)
    buffer: Any = io.BytesIO()
    torch.onnx.export(Cond(), (x,), buffer, dynamo=False)
    session = onnxruntime.InferenceSession(buffer.getvalue())
    other = x * sign
    (out,) = session.run(None, {session.get_inputs()[0].name: other.numpy()})
    np.testing.assert_allclose(out, Cond()(other).numpy())


def test_while_loop_runs_in_python_and_refuses_an_export() -> None:
    assert lax.while_loop(lambda v: v < 10, lambda v: v * 2, 1) == 16

    class While(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return lax.while_loop(lambda v: v.sum() < 10, lambda v: v * 2, x)

    with pytest.raises(NotImplementedError, match=r"use lax\.fori_loop"):
        torch.onnx.export(While(), (torch.ones(2),), cast(Any, io.BytesIO()), dynamo=False)


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

    np.testing.assert_allclose(_export_and_run(M(), x), (y * 2).numpy(), rtol=1e-5, atol=1e-6)
