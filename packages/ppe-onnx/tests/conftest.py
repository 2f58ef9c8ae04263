"""Shared helpers of the ppe-onnx tests (as fixtures): read a test case, run it in onnxruntime."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper


def read_pb(path: str) -> tuple[str, numpy.ndarray[Any, Any]]:
    tensor = onnx.TensorProto()
    with open(path, "rb") as file:
        tensor.ParseFromString(file.read())
    return tensor.name, numpy_helper.to_array(tensor)


def read_data_set(data_dir: str, prefix: str) -> list[tuple[str, numpy.ndarray[Any, Any]]]:
    pattern = re.compile(rf"{prefix}_(\d+)\.pb$")
    numbered = [(m, p) for p in os.listdir(data_dir) if (m := pattern.match(p))]
    paths = [os.path.join(data_dir, p) for m, p in sorted(numbered, key=lambda e: int(e[0][1]))]
    return [read_pb(p) for p in paths]


def run_onnxruntime(
    model_path: str, inputs: list[tuple[str, numpy.ndarray[Any, Any]]]
) -> list[numpy.ndarray[Any, Any]]:
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    graph_inputs = [i.name for i in session.get_inputs()]
    assert graph_inputs == [name for name, _ in inputs]
    return [numpy.asarray(o) for o in session.run(None, dict(inputs))]


def assert_test_case_runs(out_dir: str, expected: list[Any], data_set: int = 0) -> None:
    """onnxruntime on the saved inputs matches the saved outputs and ``expected`` (PyTorch)."""
    data_dir = os.path.join(out_dir, f"test_data_set_{data_set}")
    inputs = read_data_set(data_dir, "input")
    saved = [array for _, array in read_data_set(data_dir, "output")]
    actual = run_onnxruntime(os.path.join(out_dir, "model.onnx"), inputs)
    assert len(actual) == len(saved) == len(expected)
    for got, want, torch_out in zip(actual, saved, expected):
        numpy.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        numpy.testing.assert_allclose(got, torch_out.detach().numpy(), rtol=1e-4, atol=1e-5)


class TestCase:
    """The helpers above, for tests to take as the ``testcase`` fixture."""

    read_pb = staticmethod(read_pb)
    read_data_set = staticmethod(read_data_set)
    run_onnxruntime = staticmethod(run_onnxruntime)
    assert_runs = staticmethod(assert_test_case_runs)


@pytest.fixture
def testcase() -> type[TestCase]:
    return TestCase
