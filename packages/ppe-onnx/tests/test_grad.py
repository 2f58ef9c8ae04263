"""grad: torch.autograd.grad in PyTorch, the ONNX Gradient operator in an export."""

from __future__ import annotations

import io
from typing import Any

import onnx
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as tou


def test_grad_matches_autograd() -> None:
    x = torch.randn(3, requires_grad=True)
    (got,) = tou.grad((x**2).sum(), [x], create_graph=True)
    torch.testing.assert_close(got, 2 * x)
    assert got.requires_grad


class WithGradient(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.requires_grad_(True)
        y = torch.tanh(self.linear(x)).sum()
        gx, gw = tou.grad(y, [x, self.linear.weight])
        return gx * 2, gw


def _export(model: nn.Module, x: torch.Tensor) -> tuple[onnx.ModelProto, Any]:
    buffer: Any = io.BytesIO()
    out = tou.export(model, (x,), buffer, input_names=["x"], return_output=True)
    return onnx.load_from_string(buffer.getvalue()), out


def test_exported_grad_is_a_gradient_node_naming_its_values() -> None:
    model, x = WithGradient(), torch.randn(4, 3)
    proto, (gx, gw) = _export(model, x.clone())
    onnx.checker.check_model(proto)
    # PyTorch's values during the export are autograd's.
    xr = x.clone().requires_grad_()
    want_x, want_w = torch.autograd.grad(
        torch.tanh(model.linear(xr)).sum(), [xr, model.linear.weight]
    )
    torch.testing.assert_close(gx, want_x * 2)
    torch.testing.assert_close(gw, want_w)

    (node,) = [n for n in proto.graph.node if n.op_type == "Gradient"]
    assert node.domain == "ai.onnx.preview.training"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["xs"] == [b"x", b"linear.weight"]
    assert list(node.input) == ["x", "linear.weight"]
    # y names the value of the sum, computed by a node of the graph.
    (producer,) = [n for n in proto.graph.node if attrs["y"].decode() in n.output]
    assert producer.op_type == "ReduceSum"
    # The outputs are the model's own (the kept value is not an extra output).
    assert len(proto.graph.output) == 2
    assert proto.graph.output[1].name == node.output[1]
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("ai.onnx.preview.training", 1)}
    shape = [d.dim_value for d in proto.graph.output[1].type.tensor_type.shape.dim]
    assert shape == [2, 3]


def test_grad_of_several_outputs_in_an_export_is_refused() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.requires_grad_(True)
            return tou.grad([x.sum(), (x * 2).sum()], [x])[0]

    with pytest.raises(ValueError, match="differentiates one output; grad\\(\\) got 2"):
        _export(Two(), torch.randn(3))
