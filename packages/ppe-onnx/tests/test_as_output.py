"""as_output adds named outputs to the exported graph; onnxruntime computes them as PyTorch."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as tou

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Net(nn.Module):
    def __init__(self, add_identity: bool) -> None:
        super().__init__()
        self.add_identity = add_identity
        self.a = nn.Linear(4, 5)
        self.b = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = tou.as_output("hidden", torch.relu(self.a(x)), add_identity=self.add_identity)
        y = self.b(h)
        doubled = tou.as_output("doubled", y * 2, add_identity=self.add_identity)
        return doubled.sum(dim=1) / 2


def _export(model: nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    buffer: Any = io.BytesIO()
    tou.export(model, (x,), buffer, input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("add_identity", [True, False])
def test_extra_outputs_follow_the_model_outputs_and_match_pytorch(add_identity: bool) -> None:
    model, x = Net(add_identity), torch.randn(2, 4)
    proto = _export(model, x)
    onnx.checker.check_model(proto)
    assert [o.name for o in proto.graph.output] == ["y", "hidden", "doubled"]
    identities = [n for n in proto.graph.node if n.op_type == "Identity"]
    assert len(identities) == (2 if add_identity else 0)

    session = onnxruntime.InferenceSession(proto.SerializeToString())
    y, hidden, doubled = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        h = torch.relu(model.a(x))
        expected = [model(x), h, model.b(h) * 2]
    for got, want in zip((y, hidden, doubled), expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_as_output_returns_the_value_outside_an_export() -> None:
    x = torch.ones(2)
    assert tou.as_output("x", x) is x


def test_as_output_refuses_a_non_tensor() -> None:
    with pytest.raises(TypeError, match=r"needs a torch\.Tensor, got int"):
        tou.as_output("n", 3)  # type: ignore[arg-type]
