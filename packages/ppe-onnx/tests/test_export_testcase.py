"""export_testcase's layout, data sets, gradients, metadata and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy
import pytest
import torch

import pytorch_pfn_extras.onnx as ppe_onnx


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_second_call_adds_a_data_set(tmp_path: Any, testcase: Any) -> None:
    model = _mlp()
    x0, x1 = torch.randn(2, 4), torch.randn(2, 4)
    ppe_onnx.export_testcase(model, x0, str(tmp_path))
    ppe_onnx.export_testcase(model, x1, str(tmp_path), model_overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "test_data_set_0",
        "test_data_set_1",
    ]
    with torch.no_grad():
        testcase.assert_runs(str(tmp_path), [model(x0)], data_set=0)
        testcase.assert_runs(str(tmp_path), [model(x1)], data_set=1)


def test_model_overwrite_false_with_another_model_is_an_error(tmp_path: Any) -> None:
    ppe_onnx.export_testcase(_mlp(), torch.randn(2, 4), str(tmp_path))
    with pytest.raises(ValueError, match=r"different model.*model_overwrite"):
        ppe_onnx.export_testcase(_mlp(), torch.randn(2, 4), str(tmp_path), model_overwrite=False)
    assert not (tmp_path / "test_data_set_1").exists()


def test_gradients_are_written_per_parameter(tmp_path: Any, testcase: Any) -> None:
    model = _mlp()
    x = torch.randn(2, 4)
    grad_out = torch.randn(2, 2)
    ppe_onnx.export_testcase(model, x, str(tmp_path), output_grad=grad_out)
    model(x).backward(grad_out)
    data_dir = str(tmp_path / "test_data_set_0")
    [(_, saved_grad_out)] = testcase.read_data_set(data_dir, "gradient_input")
    numpy.testing.assert_array_equal(saved_grad_out, grad_out.numpy())
    grads = testcase.read_data_set(data_dir, "gradient")
    assert [name for name, _ in grads] == [name for name, _ in model.named_parameters()]
    for (_, saved), (_, param) in zip(grads, model.named_parameters()):
        assert param.grad is not None
        numpy.testing.assert_allclose(saved, param.grad.numpy(), rtol=1e-6)


def test_meta_json_holds_the_user_meta(tmp_path: Any) -> None:
    ppe_onnx.export_testcase(_mlp(), torch.randn(2, 4), str(tmp_path), user_meta={"run": 3})
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["user_meta"] == {"run": 3}
    assert meta["exporter"] == "torch-onnx-utils"
    assert meta["output_directory"] == str(tmp_path)
    assert meta["versions"]["torch"] == torch.__version__
    ppe_onnx.export_testcase(_mlp(), torch.randn(2, 4), str(tmp_path / "m"), metadata=False)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_check_names_the_output_and_the_difference(tmp_path: Any) -> None:
    class DiffersWhenExported(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if torch.onnx.is_in_onnx_export():
                return x * 1, x + 0.5
            return x * 1, x

    with pytest.raises(RuntimeError, match=r"output 1 .*largest difference 0\.5"):
        ppe_onnx.export_testcase(
            DiffersWhenExported(), torch.zeros(2, 3), str(tmp_path), check=True
        )


def test_non_tensor_inputs_are_a_type_error(tmp_path: Any) -> None:
    with pytest.raises(TypeError, match="got int for input 1"):
        ppe_onnx.export_testcase(_mlp(), (torch.zeros(2, 4), 3), str(tmp_path))
    with pytest.raises(TypeError, match="keyword input 'scale'"):
        ppe_onnx.export(_mlp(), (torch.zeros(2, 4), {"scale": "big"}), str(tmp_path / "m.onnx"))


def test_a_model_torch_cannot_export_fails_with_torchs_error(tmp_path: Any) -> None:
    class Eigh(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.eigh(x)[0]

    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError, match="linalg_eigh"):
        ppe_onnx.export_testcase(Eigh(), torch.eye(3), str(tmp_path))


def test_a_missing_onnx_package_names_what_to_install(tmp_path: Any) -> None:
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import torch, pytorch_pfn_extras.onnx as p\n"
        "assert not p.available\n"
        f"p.export_testcase(torch.nn.Linear(2, 2), torch.zeros(1, 2), {str(tmp_path)!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0
    assert "ImportError: pytorch_pfn_extras.onnx.export needs the onnx package" in done.stderr
    assert "pip install ppe-onnx" in done.stderr


# torch 2.13 deprecates TorchScript; the user who asks for it gets torch's notice.
@pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:DeprecationWarning")
def test_torch_script_and_trace_are_saved_and_compute_the_model(tmp_path: Any) -> None:
    model, x = _mlp(), torch.randn(2, 4)
    ppe_onnx.export_testcase(
        model, x, str(tmp_path), export_torch_script=True, export_torch_trace=True
    )
    with torch.no_grad():
        want = model(x)
        for name in ("model_script.pt", "model_trace.pt"):
            loaded = torch.jit.load(str(tmp_path / name))  # type: ignore[no-untyped-call]
            torch.testing.assert_close(loaded(x), want)
    assert not (tmp_path / "model_script.pt").with_name("model.pt").exists()


def test_chrome_trace_of_the_export_phases(tmp_path: Any) -> None:
    import gzip

    ppe_onnx.export_testcase(_mlp(), torch.randn(2, 4), str(tmp_path / "a"), output_grad=True)
    with gzip.open(tmp_path / "a" / "export_trace.json.gz") as file:
        events = json.load(file)["traceEvents"]
    names = [event["name"] for event in events]
    assert {"export", "write model", "write tensors"} <= set(names)
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in events)
    ppe_onnx.export_testcase(
        _mlp(), torch.randn(2, 4), str(tmp_path / "b"), export_chrome_tracing=False
    )
    assert not (tmp_path / "b" / "export_trace.json.gz").exists()
