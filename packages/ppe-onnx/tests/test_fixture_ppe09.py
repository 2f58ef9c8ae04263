"""The test case written by PPE 0.9 (tests/data/ppe09_onnx_testcase): ours has its layout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy
import torch

import pytorch_pfn_extras.onnx as ppe_onnx

FIXTURE = Path(__file__).parent / "data" / "ppe09_onnx_testcase"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        return self.fc(h.flatten(1))


def _layout(root: Path) -> list[str]:
    files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(f for f in files if f != "README.md")


def test_onnxruntime_on_the_fixture_matches_its_output(testcase: Any) -> None:
    inputs = testcase.read_data_set(str(FIXTURE / "test_data_set_0"), "input")
    [(_, want)] = testcase.read_data_set(str(FIXTURE / "test_data_set_0"), "output")
    [got] = testcase.run_onnxruntime(str(FIXTURE / "model.onnx"), inputs)
    numpy.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_ours_writes_the_fixtures_layout_names_and_meta_keys(tmp_path: Any, testcase: Any) -> None:
    torch.manual_seed(0)
    model = Net()
    x = torch.linspace(-1, 1, 2 * 36).reshape(2, 1, 6, 6)
    out = tmp_path / "onnx_testcase"
    ppe_onnx.export_testcase(
        model, (x,), str(out), output_grad=True, user_meta={"fixture": "ppe09"}
    )
    assert _layout(out) == _layout(FIXTURE)
    for name in os.listdir(FIXTURE / "test_data_set_0"):
        ours_name, ours = testcase.read_pb(str(out / "test_data_set_0" / name))
        theirs_name, theirs = testcase.read_pb(str(FIXTURE / "test_data_set_0" / name))
        assert ours_name == theirs_name, name
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=name)
    ours_meta = json.loads((out / "meta.json").read_text())
    theirs_meta = json.loads((FIXTURE / "meta.json").read_text())
    assert set(theirs_meta) <= set(ours_meta)
    for key in ("exporter", "strip_large_tensor_data", "user_meta"):
        assert ours_meta[key] == theirs_meta[key]
    ours_model = ppe_onnx.load_model(str(out / "model.onnx"))
    theirs_model = ppe_onnx.load_model(str(FIXTURE / "model.onnx"))
    assert ours_model.opset_import == theirs_model.opset_import
    assert [n.op_type for n in ours_model.graph.node] == [
        n.op_type for n in theirs_model.graph.node
    ]
    assert [i.name for i in ours_model.graph.input] == [i.name for i in theirs_model.graph.input]
