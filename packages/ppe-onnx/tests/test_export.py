"""export and export_testcase: every exported model runs in onnxruntime and matches PyTorch."""

from __future__ import annotations

import io
from typing import Any

import numpy
import onnx
import onnxruntime
import pytest
import torch

import pytorch_pfn_extras.onnx as ppe_onnx


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2)
        self.fc = torch.nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(h.flatten(1))


class Recurrent(torch.nn.Module):
    """An RNN whose initial state is an input (what exports for any batch size)."""

    def __init__(self, cell: type[torch.nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(4, 5, batch_first=True)  # type: ignore[call-arg]

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> Any:
        return self.rnn(x, state if len(state) > 1 else state[0])


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attention(x, x, x, need_weights=False)
        return self.norm(x + attended)


class TwoInTwoOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.a(x) + self.b(y)
        return s, torch.tanh(s).sum(dim=1)


class WithKeywords(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        out = self.fc(x)
        return out if scale is None else out * scale


def _as_list(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [t for item in output for t in _as_list(item)]


MODELS = {
    "conv": (ConvNet, lambda: (torch.randn(2, 1, 6, 6),)),
    "lstm": (
        lambda: Recurrent(torch.nn.LSTM),
        lambda: (torch.randn(2, 3, 4), torch.randn(1, 2, 5), torch.randn(1, 2, 5)),
    ),
    "gru": (lambda: Recurrent(torch.nn.GRU), lambda: (torch.randn(2, 3, 4), torch.randn(1, 2, 5))),
    "attention": (Attention, lambda: (torch.randn(2, 5, 8),)),
    "two_in_two_out": (TwoInTwoOut, lambda: (torch.randn(2, 4), torch.randn(2, 2))),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_exported_test_case_runs_in_onnxruntime_and_matches(
    name: str, tmp_path: Any, testcase: Any
) -> None:
    make_model, make_args = MODELS[name]
    model = make_model().eval()
    args = make_args()
    output = ppe_onnx.export_testcase(model, args, str(tmp_path), return_output=True, check=True)
    with torch.no_grad():
        expected = _as_list(model(*args))
    for got, want in zip(_as_list(output), expected):
        torch.testing.assert_close(got, want)
    testcase.assert_runs(str(tmp_path), expected)


def test_keyword_inputs_become_named_graph_inputs(tmp_path: Any, testcase: Any) -> None:
    model = WithKeywords().eval()
    x, scale = torch.randn(2, 4), torch.full((1,), 3.0)
    ppe_onnx.export_testcase(model, (x, {"scale": scale}), str(tmp_path))
    inputs = testcase.read_data_set(str(tmp_path / "test_data_set_0"), "input")
    assert [n for n, _ in inputs] == ["input_0", "scale"]
    with torch.no_grad():
        testcase.assert_runs(str(tmp_path), [model(x, scale=scale)])
    # torch.onnx.export's own keyword argument works as well
    other = tmp_path / "kwargs"
    ppe_onnx.export_testcase(model, (x,), str(other), kwargs={"scale": scale}, check=True)
    with torch.no_grad():
        testcase.assert_runs(str(other), [model(x, scale=scale)])


def test_dynamic_axes_run_with_another_batch_size(tmp_path: Any, testcase: Any) -> None:
    model = Recurrent(torch.nn.GRU).eval()
    ppe_onnx.export_testcase(
        model,
        (torch.randn(2, 3, 4), torch.randn(1, 2, 5)),
        str(tmp_path),
        output_names=["y", "h"],
        dynamic_axes={
            "input_0": {0: "batch", 1: "time"},
            "input_1": {1: "batch"},
            "y": {0: "batch", 1: "time"},
            "h": {1: "batch"},
        },
        check=True,
    )
    x, h0 = torch.randn(5, 7, 4), torch.randn(1, 5, 5)
    session = onnxruntime.InferenceSession(
        str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    got = session.run(["y", "h"], {"input_0": x.numpy(), "input_1": h0.numpy()})
    with torch.no_grad():
        for g, want in zip(got, model(x, h0)):
            numpy.testing.assert_allclose(g, want.numpy(), rtol=1e-4, atol=1e-5)


def test_export_writes_to_file_objects_and_paths(tmp_path: Any) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(5, 10, bias=False))
    x = torch.zeros((2, 5))
    buffer = io.BytesIO()
    assert ppe_onnx.export(model, x, buffer) is None
    proto = onnx.load(io.BytesIO(buffer.getvalue()))
    assert [n.op_type for n in proto.graph.node] == ["MatMul"]
    output = ppe_onnx.export(model, (x,), str(tmp_path / "m.onnx"), return_output=True)
    torch.testing.assert_close(output, model(x))
    assert onnx.load(str(tmp_path / "m.onnx")).graph == proto.graph


def test_export_prints_nothing_unless_verbose(capfd: Any, tmp_path: Any) -> None:
    ppe_onnx.export(torch.nn.Linear(3, 2), torch.zeros(1, 3), io.BytesIO())
    ppe_onnx.export_testcase(torch.nn.Linear(3, 2), torch.zeros(1, 3), str(tmp_path))
    assert capfd.readouterr() == ("", "")
    ppe_onnx.export(torch.nn.Linear(3, 2), torch.zeros(1, 3), io.BytesIO(), verbose=True)
    assert capfd.readouterr().out != ""


def test_export_runs_the_model_itself_only_to_return_its_output() -> None:
    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.linear(x)

    model = Counting()
    x = torch.randn(4, 3)
    assert ppe_onnx.export(model, (x,), io.BytesIO()) is None
    traced = model.calls  # the exporter's own runs
    output = ppe_onnx.export(model, (x,), io.BytesIO(), return_output=True)
    assert model.calls == 2 * traced + 1  # one more: PyTorch's run, whose output is returned
    torch.testing.assert_close(output, model.linear(x))
