"""grad gives torch.autograd.grad's gradients; exporting it is refused with the reason."""

from __future__ import annotations

import io
from typing import Any, cast

import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as tou

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_grad_matches_autograd() -> None:
    x = torch.randn(3, requires_grad=True)
    (got,) = tou.grad((x**2).sum(), [x], create_graph=True)
    torch.testing.assert_close(got, 2 * x)
    assert got.requires_grad


def test_exporting_grad_raises_a_clear_error() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return tou.grad((x**2).sum(), [x])[0]

    with pytest.raises(NotImplementedError, match="Gradient operator"):
        torch.onnx.export(
            M(), (torch.randn(3, requires_grad=True),), cast(Any, io.BytesIO()), dynamo=False
        )
