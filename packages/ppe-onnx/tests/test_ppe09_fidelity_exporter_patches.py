"""ppe-onnx hooks into torch's exporter only for the duration of its own export calls.

A user's own ``torch.onnx.export`` in the same process, before or after a ppe export (also a
failed one), runs torch's exporter as torch ships it.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as ppe_onnx


def _exporter_internals() -> dict[str, Any]:
    """The torch exporter functions that ppe-onnx wraps during its exports, by name."""
    from torch.onnx._internal.torchscript_exporter import utils as ts_utils

    return {
        "utils._run_symbolic_function": ts_utils._run_symbolic_function,
        "utils._get_named_param_dict": ts_utils._get_named_param_dict,
        "_C._jit_pass_onnx_assign_output_shape": torch._C._jit_pass_onnx_assign_output_shape,
        "_C._jit_pass_onnx_assign_scoped_names_for_node_and_value": (
            torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value
        ),
        "_C.Graph._export_onnx": torch._C.Graph._export_onnx,  # type: ignore[attr-defined]
    }


def _assert_originals(originals: dict[str, Any]) -> None:
    now = _exporter_internals()
    replaced = [name for name, value in originals.items() if now[name] is not value]
    assert replaced == []


class WithHelpers(nn.Module):
    """Uses every helper that needs the exporter's hooks."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.requires_grad_(True)
        with ppe_onnx.annotate(key="value"):
            h = self.a(x)
        h = ppe_onnx.as_output("hidden", h)
        if self.fail and torch.onnx.is_in_onnx_export():
            raise RuntimeError("the model fails during the export")
        with ppe_onnx.scoped_anchor(stage=1):
            y = self.b(torch.relu(h))
        (gx,) = ppe_onnx.grad(y.sum(), [x])
        return y + gx.sum()


class WithHidden(nn.Module):
    """An extra output only, so that onnxruntime runs the model."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(ppe_onnx.as_output("hidden", self.a(x)))


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.linear = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)).flatten(1))  # type: ignore[no-any-return]


def _plain_export(model: nn.Module, x: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    with pytest.warns(DeprecationWarning):  # torch's notice of its TorchScript-based exporter
        torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=["x"])
    return buffer.getvalue()


def _ppe_export(model: nn.Module, x: torch.Tensor, **kwargs: Any) -> onnx.ModelProto:
    buffer = io.BytesIO()
    ppe_onnx.export(model, (x,), buffer, input_names=["x"], **kwargs)
    return onnx.load_from_string(buffer.getvalue())


def test_torch_exporter_internals_are_the_originals_after_ppe_exports(tmp_path: Any) -> None:
    originals = _exporter_internals()
    proto = _ppe_export(WithHelpers(), torch.randn(2, 3), strip_doc_string=True)
    # the helpers worked: the hooks were there during the export
    assert [o.name for o in proto.graph.output][1:] == ["hidden"]
    assert any(n.op_type == "Gradient" for n in proto.graph.node)
    assert any(n.name == "Anchor_0_start" for n in proto.graph.node)
    _assert_originals(originals)
    ppe_onnx.export_testcase(WithHelpers(), torch.randn(2, 3), str(tmp_path))
    _assert_originals(originals)


@pytest.mark.parametrize("where", ["model", "custom_exporter"])
def test_torch_exporter_internals_are_the_originals_after_a_failing_ppe_export(
    where: str,
) -> None:
    originals = _exporter_internals()

    def failing_exporter(model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        torch.onnx.export(model, args, f, **kwargs)
        raise OSError("the custom exporter fails after exporting")

    if where == "model":
        with pytest.raises(RuntimeError, match="the model fails during the export"):
            _ppe_export(WithHelpers(fail=True), torch.randn(2, 3))
    else:
        with pytest.raises(OSError, match="the custom exporter fails"):
            _ppe_export(WithHelpers(), torch.randn(2, 3), custom_exporter=failing_exporter)
    _assert_originals(originals)
    # and the next ppe export works as usual
    proto = _ppe_export(WithHelpers(), torch.randn(2, 3))
    assert [o.name for o in proto.graph.output][1:] == ["hidden"]
    _assert_originals(originals)


def test_ppe_exports_nest_and_keep_their_hooks_until_the_outermost_ends() -> None:
    originals = _exporter_internals()
    seen: dict[str, Any] = {}

    def nesting_exporter(model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        seen["hooked_outer"] = _exporter_internals()
        seen["inner"] = _ppe_export(WithHelpers(), torch.randn(2, 3))  # a ppe export inside
        seen["hooked_after_inner"] = _exporter_internals()
        torch.onnx.export(model, args, f, **kwargs)  # the outer export, after the inner one

    x = torch.randn(2, 3)
    model = WithHidden()
    outer = _ppe_export(model, x, custom_exporter=nesting_exporter)
    _assert_originals(originals)
    hooked = [n for n, v in seen["hooked_outer"].items() if v is not originals[n]]
    assert hooked != []  # ppe's hooks were in place in the outer export
    assert seen["hooked_after_inner"] == seen["hooked_outer"]  # the inner exit kept them
    for proto in (seen["inner"], outer):
        assert [o.name for o in proto.graph.output][1:] == ["hidden"]
        assert not [a.name for n in proto.graph.node for a in n.attribute if "ppe" in a.name]
    session = onnxruntime.InferenceSession(outer.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    assert names[1:] == ["hidden"]
    _, hidden = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(hidden, model.a(x).numpy(), rtol=1e-5, atol=1e-6)


def test_plain_torch_onnx_export_gives_the_same_model_before_and_after_ppe_exports() -> None:
    model, x = Small(), torch.randn(2, 1, 6, 6)
    before = _plain_export(model, x)
    _ppe_export(WithHelpers(), torch.randn(2, 3), strip_doc_string=True)
    with pytest.raises(RuntimeError, match="the model fails"):
        _ppe_export(WithHelpers(fail=True), torch.randn(2, 3))
    after = _plain_export(model, x)
    assert after == before
    proto = onnx.load_from_string(after)
    assert [n.op_type for n in proto.graph.node] == ["Conv", "Relu", "Flatten", "Gemm"]
    session = onnxruntime.InferenceSession(after)
    (got,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)


class WithOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with ppe_onnx.annotate(key="value"):
            h = self.a(x)
        return ppe_onnx.as_output("hidden", h) * 2


def test_helpers_in_a_plain_torch_onnx_export_warn_and_leave_torch_alone() -> None:
    originals = _exporter_internals()
    model, x = WithOutput(), torch.randn(2, 3)
    buffer = io.BytesIO()
    with (
        pytest.warns(DeprecationWarning),
        pytest.warns(UserWarning, match=r"as_output\(\) .*pytorch_pfn_extras\.onnx\.export") as w,
        pytest.warns(UserWarning, match=r"annotate\(\) .*pytorch_pfn_extras\.onnx\.export"),
    ):
        torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=["x"])
    _assert_originals(originals)
    # the warnings point at the model's forward
    assert {r.filename for r in w if "does nothing" in str(r.message)} == {__file__}
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)  # no ppe marker attribute left behind
    assert len(proto.graph.output) == 1
    (got,) = onnxruntime.InferenceSession(buffer.getvalue()).run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)


class WithGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.requires_grad_(True)
        (gx,) = ppe_onnx.grad(torch.tanh(self.a(x)).sum(), [x])
        return gx


def test_grad_in_a_plain_torch_onnx_export_names_the_ppe_export() -> None:
    originals = _exporter_internals()
    buffer = io.BytesIO()
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(RuntimeError, match=r"grad\(\) .*pytorch_pfn_extras\.onnx\.export"),
    ):
        torch.onnx.export(WithGrad(), (torch.randn(2, 3),), buffer, dynamo=False)
    _assert_originals(originals)
    proto = _ppe_export(WithGrad(), torch.randn(2, 3))  # ppe's export makes its Gradient node
    assert [n.op_type for n in proto.graph.node].count("Gradient") == 1


def _doc_strings(proto: onnx.ModelProto) -> list[str]:
    """The nodes' doc strings: their source locations, or empty where they were stripped."""
    return [n.doc_string for n in proto.graph.node]


def test_nested_ppe_exports_each_keep_or_strip_doc_strings_as_they_asked() -> None:
    x = torch.randn(2, 1, 6, 6)
    seen: dict[str, onnx.ModelProto] = {}

    def nesting_exporter(model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        seen["inner"] = _ppe_export(Small(), x, strip_doc_string=False)
        torch.onnx.export(model, args, f, **kwargs)

    outer = _ppe_export(Small(), x, custom_exporter=nesting_exporter, strip_doc_string=True)
    assert all(_doc_strings(seen["inner"]))  # kept, though the outer export strips them
    assert not any(_doc_strings(outer))


def test_a_plain_export_in_another_thread_during_a_ppe_export_runs_without_the_hooks() -> None:
    model, x = Small(), torch.randn(2, 1, 6, 6)
    got: dict[str, Any] = {}

    def plain_export() -> None:
        buffer = io.BytesIO()
        try:
            torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=["x"])
        except BaseException as error:  # reported by the test's thread
            got["error"] = error
        got["data"] = buffer.getvalue()

    def exporter(model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        thread = threading.Thread(target=plain_export)
        thread.start()
        thread.join()
        torch.onnx.export(model, args, f, **kwargs)

    ours = _ppe_export(
        WithHidden(), torch.randn(2, 3), custom_exporter=exporter, strip_doc_string=False
    )
    assert [o.name for o in ours.graph.output][1:] == ["hidden"] and any(_doc_strings(ours))
    assert "error" not in got
    # torch's default (no doc strings without verbose), not what the ppe export asked for
    assert not any(_doc_strings(onnx.load_from_string(got["data"])))
    after = _plain_export(model, x)
    assert got["data"] == after
