"""symbolic_registry looks up and registers symbolic functions of the TorchScript exporter."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

from pytorch_pfn_extras.onnx import symbolic_registry

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_builtin_operators_are_registered_under_the_empty_domain() -> None:
    assert symbolic_registry.is_registered_op("relu", "", 17)
    assert callable(symbolic_registry.get_registered_op("relu", "", 17))
    assert not symbolic_registry.is_registered_op("no_such_op", "", 17)


def test_looking_up_an_unknown_operator_names_it() -> None:
    with pytest.raises(KeyError, match="aten::no_such_op"):
        symbolic_registry.get_registered_op("no_such_op", "", 17)


def test_a_registered_symbolic_function_is_used_by_the_export() -> None:
    def softsign_as_abs_formula(g: Any, x: Any) -> Any:
        return g.op(
            "Div", x, g.op("Add", g.op("Abs", x), g.op("Constant", value_t=torch.tensor(1.0)))
        )

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.softsign(x)

    symbolic_registry.register_op("softsign", softsign_as_abs_formula, "", 9)
    try:
        assert symbolic_registry.get_registered_op("softsign", "", 17) is softsign_as_abs_formula
        buffer: Any = io.BytesIO()
        x = torch.randn(3, 4)
        torch.onnx.export(M(), (x,), buffer, dynamo=False)
    finally:
        torch.onnx.unregister_custom_op_symbolic(  # type: ignore[attr-defined]
            "::softsign", 9
        )
    proto = onnx.load_from_string(buffer.getvalue())
    assert {n.op_type for n in proto.graph.node} >= {"Abs", "Div"}
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(out, torch.nn.functional.softsign(x).numpy(), rtol=1e-5)
