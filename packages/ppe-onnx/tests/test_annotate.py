"""The reference docs' annotate / apply_annotation / scoped_anchor examples, on the exported graph."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import pytorch_pfn_extras.onnx as tou

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _export(model: nn.Module, x: torch.Tensor, opset: int | None = None) -> onnx.ModelProto:
    buffer: Any = io.BytesIO()
    tou.export(model, (x,), buffer, opset_version=opset)
    return onnx.load_from_string(buffer.getvalue())


def _run(proto: onnx.ModelProto, x: torch.Tensor) -> list[Any]:
    import onnxruntime

    session = onnxruntime.InferenceSession(proto.SerializeToString())
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})  # type: ignore[no-any-return]


def _keys(proto: onnx.ModelProto) -> list[tuple[str, str | None]]:
    """(op_type, value of the attribute ``key``) of each node."""
    result = []
    for node in proto.graph.node:
        values = [a.s.decode() for a in node.attribute if a.name == "key"]
        result.append((node.op_type, values[0] if values else None))
    return result


class Net(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(6, 9, 3)
        self.conv2 = nn.Conv2d(9, 12, 3)
        self.linear = nn.Linear(28, 20)
        self.linear2 = nn.Linear(20, 15)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.mode == "annotate":
            with tou.annotate(key="value"):
                h = self.conv2(h)
                h = self.linear(h)
        elif self.mode == "annotate_relu":
            with tou.annotate(key="value"):
                h = self.conv2(h)
                h = F.relu(h)
                h = self.linear(h)
        elif self.mode == "apply_annotation":

            def _f(x: torch.Tensor) -> torch.Tensor:
                h = self.conv2(x)
                h = F.relu(h)
                return self.linear(h)  # type: ignore[no-any-return]

            h = tou.apply_annotation(_f, h, key="value")
        else:
            with tou.scoped_anchor(key="value"):
                h = self.conv2(h)
                h = self.linear(h)
        return self.linear2(h)  # type: ignore[no-any-return]


X = torch.randn((1, 6, 32, 32))


def test_annotate_marks_the_first_node_of_each_module_in_the_block() -> None:
    assert _keys(_export(Net("annotate"), X)) == [
        ("Conv", None),
        ("Conv", "value"),
        ("MatMul", "value"),
        ("Add", None),
        ("MatMul", None),
        ("Add", None),
    ]


def test_annotate_leaves_functions_called_in_the_block_alone() -> None:
    assert _keys(_export(Net("annotate_relu"), X)) == [
        ("Conv", None),
        ("Conv", "value"),
        ("Relu", None),
        ("MatMul", "value"),
        ("Add", None),
        ("MatMul", None),
        ("Add", None),
    ]


@pytest.mark.parametrize("opset", [17, None])
def test_apply_annotation_marks_functions_too(opset: int | None) -> None:
    assert _keys(_export(Net("apply_annotation"), X, opset)) == [
        ("Conv", None),
        ("Conv", "value"),
        ("Relu", "value"),
        ("MatMul", "value"),
        ("Add", None),
        ("MatMul", None),
        ("Add", None),
    ]


@pytest.mark.parametrize("opset", [17, None])
def test_scoped_anchor_adds_named_identity_nodes_around_the_modules(opset: int | None) -> None:
    proto = _export(Net("scoped_anchor"), X, opset)
    assert _keys(proto) == [
        ("Conv", None),
        ("Identity", "value"),
        ("Conv", None),
        ("MatMul", None),
        ("Add", None),
        ("Identity", "value"),
        ("MatMul", None),
        ("Add", None),
    ]
    names = [n.name for n in proto.graph.node if n.op_type == "Identity"]
    assert names == ["Anchor_0_start", "Anchor_0_end"]


def test_scoped_anchor_around_a_submodule_made_of_a_function() -> None:
    class _Add(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.ones((1,))

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add = _Add()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with tou.scoped_anchor(key="value"):
                return self.add(x)  # type: ignore[no-any-return]

    proto = _export(Outer(), X)
    assert [(n.op_type, n.name) for n in proto.graph.node if n.op_type != "Constant"] == [
        ("Identity", "Anchor_0_start"),
        ("Add", "/add/Add"),
        ("Identity", "Anchor_0_end"),
    ]
    assert _keys(proto)[0] == ("Identity", "value")


def test_anchors_are_numbered_per_export_and_keep_the_values() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with tou.scoped_anchor():
                h = self.a(x)
            with tou.scoped_anchor():
                return self.b(h)  # type: ignore[no-any-return]

    model, x = Two(), torch.randn(2, 4)
    for _ in range(2):
        proto = _export(model, x)
        names = [n.name for n in proto.graph.node if n.op_type == "Identity"]
        assert names == ["Anchor_0_start", "Anchor_0_end", "Anchor_1_start", "Anchor_1_end"]
    onnx.checker.check_model(proto)
    (out,) = _run(proto, x)
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("value", "field", "expected"),
    [
        (3, "i", 3),
        (True, "i", 1),
        (0.5, "f", 0.5),
        ([1, 2], "ints", [1, 2]),
        (["a"], "strings", [b"a"]),
    ],
)
def test_annotation_values_become_typed_attributes(value: Any, field: str, expected: Any) -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return tou.apply_annotation(torch.relu, x, key=value)

    (node,) = _export(M(), torch.randn(2, 3)).graph.node
    (attribute,) = node.attribute
    got = getattr(attribute, field)
    assert (list(got) if field in ("ints", "strings") else got) == pytest.approx(expected)


def test_annotations_do_nothing_outside_an_export() -> None:
    model = Net("apply_annotation")
    plain = model.linear2(model.linear(F.relu(model.conv2(model.conv(X)))))
    torch.testing.assert_close(model(X), plain)
    with tou.scoped_anchor(key="value"), tou.annotate(key="value"):
        y = model.linear2(torch.ones(1, 20))
    assert y.shape == (1, 15)


def test_an_attribute_that_onnx_cannot_hold_is_refused() -> None:
    with pytest.raises(TypeError, match="'key' must be a bool, int, float, str"):
        tou.apply_annotation(torch.relu, torch.ones(1), key={"a": 1})
