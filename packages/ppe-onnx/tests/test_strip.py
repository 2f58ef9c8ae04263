"""Strip and unstrip large tensors: shapes and dtypes stay, files shrink, models load."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy
import onnx
import pytest
import torch

import pytorch_pfn_extras.onnx as ppe_onnx
from pytorch_pfn_extras.onnx.unstrip_tensor import unstrip


def _signature(model: Any) -> list[tuple[str, list[int], int]]:
    return [(t.name, list(t.dims), t.data_type) for t in model.graph.initializer]


def test_a_few_million_parameters_shrink_to_kilobytes(tmp_path: Any) -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(1000, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 1000)
    )
    x = torch.randn(1, 1000)
    ppe_onnx.export_testcase(model, x, str(tmp_path / "full"), output_grad=False)
    ppe_onnx.export_testcase(model, x, str(tmp_path / "slim"), strip_large_tensor_data=True)
    full = (tmp_path / "full" / "model.onnx").stat().st_size
    slim = (tmp_path / "slim" / "model.onnx").stat().st_size
    assert full > 8_000_000
    assert slim < 4_000
    stripped = ppe_onnx.load_model(str(tmp_path / "slim" / "model.onnx"))
    assert _signature(stripped) == _signature(onnx.load(str(tmp_path / "full" / "model.onnx")))


def test_unstrip_round_trips_shapes_and_dtypes_and_runs(tmp_path: Any, testcase: Any) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten())
    x = torch.randn(1, 3, 8, 8)
    out = tmp_path / "case"
    ppe_onnx.export_testcase(model, x, str(out), strip_large_tensor_data=True)
    path = str(out / "model.onnx")
    stripped = ppe_onnx.load_model(path)
    weight = stripped.graph.initializer[0]
    assert not weight.raw_data and weight.data_location == onnx.TensorProto.EXTERNAL
    unstrip(str(out), str(tmp_path / "unstripped"))
    restored = onnx.load(str(tmp_path / "unstripped" / "model.onnx"))
    onnx.checker.check_model(restored)
    assert _signature(restored) == _signature(stripped)
    values = onnx.numpy_helper.to_array(restored.graph.initializer[0])
    original = model[0].weight.detach().numpy()
    assert values.shape == original.shape and values.dtype == original.dtype
    assert abs(values.mean() - original.mean()) < 0.1
    inputs = testcase.read_data_set(str(out / "test_data_set_0"), "input")
    [y] = testcase.run_onnxruntime(str(tmp_path / "unstripped" / "model.onnx"), inputs)
    assert y.shape == (1, 8 * 6 * 6)


def test_small_tensors_keep_their_data(tmp_path: Any) -> None:
    model = torch.nn.Linear(10, 5)
    ppe_onnx.export(
        model, torch.zeros(1, 10), str(tmp_path / "m.onnx"), strip_large_tensor_data=True
    )
    proto = ppe_onnx.load_model(str(tmp_path / "m.onnx"))
    kept = {
        t.name: ppe_onnx.is_large_tensor(t, ppe_onnx.LARGE_TENSOR_DATA_THRESHOLD)
        for t in proto.graph.initializer
    }
    assert kept == {"weight": False, "bias": False}
    assert ppe_onnx.is_large_tensor(torch.zeros(101), 100)
    numpy.testing.assert_array_equal(
        onnx.numpy_helper.to_array(proto.graph.initializer[0]), model.weight.detach().numpy()
    )


@pytest.mark.parametrize("module", ["strip_large_tensor", "unstrip_tensor"])
def test_command_line_tools_have_help(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"pytorch_pfn_extras.onnx.{module}", "-h"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "usage: python -m pytorch_pfn_extras.onnx." in done.stdout
    assert done.stderr == ""


def test_command_line_strip_then_unstrip(tmp_path: Any) -> None:
    model = torch.nn.Linear(100, 100)
    src = str(tmp_path / "m.onnx")
    ppe_onnx.export(model, torch.zeros(1, 100), src)
    slim, back = str(tmp_path / "slim.onnx"), str(tmp_path / "back.onnx")
    run = [sys.executable, "-m", "pytorch_pfn_extras.onnx."]
    subprocess.run(
        [run[0], run[1], run[2] + "strip_large_tensor", src, "--out_onnx_path", slim],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [run[0], run[1], run[2] + "unstrip_tensor", slim, "--out_path", back],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "slim.onnx").stat().st_size < 2_000
    assert _signature(onnx.load(back)) == _signature(onnx.load(src))
