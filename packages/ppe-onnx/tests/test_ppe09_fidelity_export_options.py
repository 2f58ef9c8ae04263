"""PPE 0.9's export keywords and value handling: training modes, the checker, doc strings, a
custom exporter, flat returned outputs, tuple inputs, no_grad and grad of non-scalars.

Every exported model runs in onnxruntime and is compared with PyTorch.
"""

from __future__ import annotations

import collections
import io
from typing import Any, NamedTuple

import numpy
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import pytorch_pfn_extras.onnx as ppe_onnx

TrainingMode = torch.onnx.TrainingMode


def _session(data: bytes) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])


def _run(data: bytes, feeds: dict[str, torch.Tensor]) -> list[numpy.ndarray[Any, Any]]:
    return [
        numpy.asarray(o) for o in _session(data).run(None, {k: v.numpy() for k, v in feeds.items()})
    ]


def _export(model: nn.Module, args: Any, **kwargs: Any) -> tuple[bytes, Any]:
    buffer = io.BytesIO()
    output = ppe_onnx.export(model, args, buffer, **kwargs)
    return buffer.getvalue(), output


def _close(got: Any, want: torch.Tensor) -> None:
    numpy.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# training=


class ModeDependent(nn.Module):
    """Doubles in training mode, triples in eval mode; a Dropout(0) the exporter keeps only in
    a training-mode export."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.linear(x))
        return h * 2 if self.training else h * 3  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("training", "model_training", "exported_training"),
    [
        (True, False, True),
        (TrainingMode.TRAINING, False, True),
        (False, True, False),
        (TrainingMode.EVAL, True, False),
        (TrainingMode.PRESERVE, True, True),
        (TrainingMode.PRESERVE, False, False),
    ],
)
def test_training_keyword_exports_in_the_mode_it_names(
    training: Any, model_training: bool, exported_training: bool
) -> None:
    model = ModeDependent().train(model_training)
    x = torch.randn(4, 3)
    data, output = _export(
        model, x, training=training, do_constant_folding=False, return_output=True
    )
    assert model.training is model_training  # restored
    proto = onnx.load_from_string(data)
    assert ("Dropout" in [n.op_type for n in proto.graph.node]) is exported_training
    want = model.linear(x) * (2 if exported_training else 3)
    [got] = _run(data, {"input_0": x})
    _close(got, want)
    torch.testing.assert_close(output, want.detach())


def test_training_keyword_in_export_testcase_writes_the_training_outputs(
    tmp_path: Any, testcase: Any
) -> None:
    model = ModeDependent().eval()
    x = torch.randn(4, 3)
    ppe_onnx.export_testcase(model, x, str(tmp_path), training=True, do_constant_folding=False)
    testcase.assert_runs(str(tmp_path), [model.linear(x) * 2])


def test_training_keyword_of_another_type_is_a_type_error() -> None:
    with pytest.raises(
        TypeError, match=r"training must be a bool or a torch.onnx.TrainingMode.*'train'"
    ):
        _export(ModeDependent(), torch.randn(4, 3), training="train")


# ---------------------------------------------------------------------------------------------
# enable_onnx_checker=


class Annotated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with ppe_onnx.annotate(custom_key="value"):  # not an attribute of ONNX's Gemm
            return self.linear(x)  # type: ignore[no-any-return]


def test_enable_onnx_checker_rejects_an_invalid_model() -> None:
    model, x = Annotated(), torch.randn(4, 3)
    data, _ = _export(model, x)  # without the checker the attribute is exported
    (gemm,) = onnx.load_from_string(data).graph.node
    assert "custom_key" in [a.name for a in gemm.attribute]
    with pytest.raises(onnx.checker.ValidationError, match=r"enable_onnx_checker=True.*custom_key"):
        _export(model, x, enable_onnx_checker=True)


def test_enable_onnx_checker_passes_a_valid_model(tmp_path: Any, testcase: Any) -> None:
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    data, _ = _export(model, x, enable_onnx_checker=True)
    [got] = _run(data, {"input_0": x})
    _close(got, model(x))
    ppe_onnx.export_testcase(model, x, str(tmp_path), enable_onnx_checker=True)
    testcase.assert_runs(str(tmp_path), [model(x)])


@pytest.mark.parametrize("keyword", ["enable_onnx_checker", "strip_doc_string"])
def test_bool_keywords_of_another_type_are_type_errors(keyword: str) -> None:
    with pytest.raises(TypeError, match=rf"{keyword} must be a bool, got str: 'yes'"):
        _export(nn.Linear(3, 2), torch.randn(4, 3), **{keyword: "yes"})


# ---------------------------------------------------------------------------------------------
# strip_doc_string=


def _doc_strings(data: bytes) -> list[str]:
    return [node.doc_string for node in onnx.load_from_string(data).graph.node]


def test_strip_doc_string_false_keeps_the_source_locations() -> None:
    model, x = nn.Sequential(nn.Linear(3, 2), nn.ReLU()), torch.randn(4, 3)
    kept, _ = _export(model, x, strip_doc_string=False)
    docs = _doc_strings(kept)
    assert len(docs) == 2
    assert "linear.py" in docs[0]
    assert "relu" in docs[1]
    [got] = _run(kept, {"input_0": x})
    _close(got, model(x))
    # By default (and so after the call that kept them) they are stripped.
    default, _ = _export(model, x)
    assert _doc_strings(default) == ["", ""]


def test_strip_doc_string_true_strips_them_also_when_verbose(capfd: Any) -> None:
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    verbose, _ = _export(model, x, verbose=True)
    assert _doc_strings(verbose)[0] != ""
    stripped, _ = _export(model, x, verbose=True, strip_doc_string=True)
    assert _doc_strings(stripped) == [""]
    assert capfd.readouterr().out != ""  # verbose still prints
    [got] = _run(stripped, {"input_0": x})
    _close(got, model(x))


# ---------------------------------------------------------------------------------------------
# custom_exporter=


class Recorder:
    """A custom exporter: torch.onnx.export at opset 17, recording what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        self.calls.append(((model, args, f), kwargs))
        torch.onnx.export(model, args, f, **{**kwargs, "opset_version": 17})


class WithKeyword(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return self.linear(x) * scale  # type: ignore[no-any-return]


def test_custom_exporter_gets_torch_onnx_export_arguments_and_writes_the_model() -> None:
    model = WithKeyword()
    x, scale = torch.randn(4, 3), torch.full((1,), 2.0)
    exporter = Recorder()
    data, _ = _export(
        model,
        (x, {"scale": scale}),
        custom_exporter=exporter,
        training=False,
        output_names=["y"],
        enable_onnx_checker=True,
        strip_doc_string=True,
    )
    [((got_model, got_args, f), kwargs)] = exporter.calls
    assert got_model is model
    assert isinstance(got_args, tuple) and len(got_args) == 1 and got_args[0] is x
    assert isinstance(f, io.IOBase)
    assert kwargs["kwargs"] == {"scale": scale}
    assert kwargs["input_names"] == ["input_0", "scale"]
    assert kwargs["output_names"] == ["y"]
    assert kwargs["training"] == TrainingMode.EVAL  # as torch.onnx.export takes it
    assert kwargs["dynamo"] is False
    assert kwargs["verbose"] is False
    assert not {"custom_exporter", "enable_onnx_checker", "strip_doc_string"} & set(kwargs)
    proto = onnx.load_from_string(data)
    assert [o.version for o in proto.opset_import if o.domain == ""] == [17]
    [got] = _run(data, {"input_0": x, "scale": scale})
    _close(got, model(x, scale=scale))


def test_custom_exporter_in_export_testcase(tmp_path: Any, testcase: Any) -> None:
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    exporter = Recorder()
    ppe_onnx.export_testcase(model, x, str(tmp_path), custom_exporter=exporter, check=True)
    assert len(exporter.calls) == 1
    proto = ppe_onnx.load_model(str(tmp_path / "model.onnx"))
    assert [o.version for o in proto.opset_import if o.domain == ""] == [17]
    testcase.assert_runs(str(tmp_path), [model(x)])


def test_custom_exporter_that_writes_nothing_is_an_error() -> None:
    def lazy(model: nn.Module, args: Any, f: Any, **kwargs: Any) -> None:
        del model, args, f, kwargs

    with pytest.raises(RuntimeError, match=r"custom_exporter .*lazy.* wrote nothing"):
        _export(nn.Linear(3, 2), torch.randn(4, 3), custom_exporter=lazy)


def test_custom_exporter_that_is_not_callable_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"custom_exporter must be a callable.*got str"):
        _export(nn.Linear(3, 2), torch.randn(4, 3), custom_exporter="torch")


# ---------------------------------------------------------------------------------------------
# return_output=True


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> Any:
        h = self.linear(x)
        return h, (h * 2, [h + 1]), {"last": h.sum(dim=1)}


def _nested_expected(model: Nested, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        h = model.linear(x)
    return [h, h * 2, h + 1, h.sum(dim=1)]


def test_return_output_of_nested_outputs_is_a_flat_list_in_graph_order() -> None:
    model, x = Nested(), torch.randn(4, 3)
    data, output = _export(model, x, return_output=True)
    want = _nested_expected(model, x)
    assert type(output) is list
    assert len(output) == len(want) == len(onnx.load_from_string(data).graph.output)
    for got, w in zip(output, want):
        torch.testing.assert_close(got, w)
        assert not got.requires_grad
    for got, w in zip(_run(data, {"input_0": x}), want):
        _close(got, w)


def test_export_testcase_return_output_is_the_same_flat_list(tmp_path: Any, testcase: Any) -> None:
    model, x = Nested(), torch.randn(4, 3)
    output = ppe_onnx.export_testcase(model, x, str(tmp_path), return_output=True, check=True)
    want = _nested_expected(model, x)
    assert type(output) is list
    for got, w in zip(output, want, strict=True):
        torch.testing.assert_close(got, w)
    testcase.assert_runs(str(tmp_path), want)


def test_return_output_of_a_tuple_output_is_a_list() -> None:
    model = nn.LSTM(3, 2)
    x = torch.randn(5, 1, 3)
    _, output = _export(model, x, return_output=True)
    with torch.no_grad():
        y, (h, c) = model(x)
    assert type(output) is list
    for got, want in zip(output, [y, h, c], strict=True):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# Tuple inputs


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * y  # type: ignore[no-any-return]


class PairInput(nn.Module):
    """Takes a pair as one argument, and a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor], z: torch.Tensor) -> torch.Tensor:
        x, y = pair
        return self.linear(x) * y + z  # type: ignore[no-any-return]


def test_tuple_of_inputs_gives_one_graph_input_each() -> None:
    model = TwoInputs()
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    data, output = _export(model, (x, y), return_output=True)
    assert [i.name for i in onnx.load_from_string(data).graph.input] == ["input_0", "input_1"]
    [got] = _run(data, {"input_0": x, "input_1": y})
    _close(got, model(x, y))
    torch.testing.assert_close(output, model(x, y).detach())


@pytest.mark.parametrize("container", [tuple, list])
def test_a_tuple_argument_is_one_model_input_of_several_graph_inputs(
    container: type, tmp_path: Any, testcase: Any
) -> None:
    model = PairInput()
    x, y, z = torch.randn(4, 3), torch.randn(4, 2), torch.randn(4, 2)
    want = model((x, y), z)
    data, output = _export(model, (container([x, y]), z), return_output=True)
    assert [i.name for i in onnx.load_from_string(data).graph.input] == [
        "input_0",
        "input_1",
        "input_2",
    ]
    [got] = _run(data, {"input_0": x, "input_1": y, "input_2": z})
    _close(got, want)
    torch.testing.assert_close(output, want.detach())
    ppe_onnx.export_testcase(model, (container([x, y]), z), str(tmp_path), check=True)
    inputs = testcase.read_data_set(str(tmp_path / "test_data_set_0"), "input")
    assert [name for name, _ in inputs] == ["input_0", "input_1", "input_2"]
    for (_, saved), tensor in zip(inputs, [x, y, z], strict=True):
        numpy.testing.assert_array_equal(saved, tensor.numpy())
    testcase.assert_runs(str(tmp_path), [want])


def test_only_a_tuple_argument() -> None:
    class Pair(nn.Module):
        def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return pair[0] - pair[1]

    x, y = torch.randn(3), torch.randn(3)
    data, _ = _export(Pair(), ((x, y),), input_names=["a", "b"])
    [got] = _run(data, {"a": x, "b": y})
    _close(got, x - y)


def test_a_non_tensor_inside_a_tuple_input_is_named_in_the_type_error() -> None:
    with pytest.raises(TypeError, match=r"got int for input 0\[1\]"):
        _export(PairInput(), ((torch.randn(4, 3), 3), torch.randn(4, 2)))


def test_keyword_inputs_in_another_order_than_forward_name_the_right_graph_inputs(
    tmp_path: Any, testcase: Any
) -> None:
    class Keywords(nn.Module):
        def forward(
            self, x: torch.Tensor, a: torch.Tensor | None = None, b: torch.Tensor | None = None
        ) -> torch.Tensor:
            assert a is not None and b is not None
            return x + a * 2 + b * 3

    x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
    ppe_onnx.export_testcase(Keywords(), (x, {"b": b, "a": a}), str(tmp_path), check=True)
    inputs = testcase.read_data_set(str(tmp_path / "test_data_set_0"), "input")
    assert [name for name, _ in inputs] == ["input_0", "a", "b"]
    testcase.assert_runs(str(tmp_path), [x + a * 2 + b * 3])


# ---------------------------------------------------------------------------------------------
# no_grad


class Point(NamedTuple):
    x: torch.Tensor
    y: Any


def test_no_grad_detaches_tensors_in_nested_containers_keeping_their_types() -> None:
    x = torch.randn(3, requires_grad=True)

    def fn(v: torch.Tensor) -> Any:
        counts: collections.defaultdict[str, Any] = collections.defaultdict(list)
        counts["v"] = v
        return (
            v,  # returned as it came: requires grad unless detached
            [v * 2, {"deep": (v + 1, [v])}],
            Point(v * 3, "label"),
            collections.OrderedDict(a=v, b=1),
            counts,
        )

    result = ppe_onnx.no_grad(fn, x)
    assert type(result) is tuple
    assert type(result[1]) is list and type(result[1][1]) is dict
    assert type(result[1][1]["deep"]) is tuple and type(result[1][1]["deep"][1]) is list
    assert type(result[2]) is Point and result[2].y == "label"
    assert type(result[3]) is collections.OrderedDict and list(result[3]) == ["a", "b"]
    assert result[3]["b"] == 1
    assert type(result[4]) is collections.defaultdict and result[4]["missing"] == []
    tensors = [
        result[0],
        result[1][0],
        result[1][1]["deep"][0],
        result[1][1]["deep"][1][0],
        result[2].x,
        result[3]["a"],
        result[4]["v"],
    ]
    for tensor in tensors:
        assert not tensor.requires_grad
    torch.testing.assert_close(tensors, [x, 2 * x, x + 1, x, 3 * x, x, x])
    assert x.requires_grad  # the caller's tensor is not changed


def test_no_grad_with_nested_outputs_exports_the_same_values() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = ppe_onnx.no_grad(lambda v: {"h": (self.linear(v), [v.sum(dim=1)])}, x)
            h, [s] = out["h"]
            assert not h.requires_grad
            return h * s.unsqueeze(1)  # type: ignore[no-any-return]

    model, x = Model(), torch.randn(4, 3)
    data, output = _export(model, x, return_output=True)
    want = model.linear(x) * x.sum(dim=1, keepdim=True)
    [got] = _run(data, {"input_0": x})
    _close(got, want)
    torch.testing.assert_close(output, want.detach())


# ---------------------------------------------------------------------------------------------
# grad of a non-scalar output


def test_grad_of_a_non_scalar_output_uses_output_gradients_of_ones() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    y = torch.tanh(x @ w)  # (4, 2)
    got = ppe_onnx.grad(y, [x, w], retain_graph=True)
    want = torch.autograd.grad(y, [x, w], grad_outputs=torch.ones_like(y), retain_graph=True)
    torch.testing.assert_close(got, want)
    # several outputs: ones for each
    z = (x**2).sum(dim=0)  # (3,)
    got = ppe_onnx.grad([y, z], [x], retain_graph=True)
    want = torch.autograd.grad([y, z], [x], grad_outputs=[torch.ones_like(y), torch.ones_like(z)])
    torch.testing.assert_close(got, want)


class NonScalarGradient(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.requires_grad_(True)
        y = torch.tanh(self.linear(x))  # (4, 2)
        (gx,) = ppe_onnx.grad(y, [x])
        return y, gx


def _value_model(proto: onnx.ModelProto, input_name: str, value: str) -> bytes:
    """The part of ``proto`` computing ``value`` from ``input_name`` (without the Gradient
    node, which onnxruntime's inference build does not run)."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    extracted = onnx.utils.Extractor(inferred).extract_model([input_name], [value])
    return bytes(extracted.SerializeToString())


def test_exported_grad_of_a_non_scalar_output_differentiates_its_sum() -> None:
    torch.manual_seed(0)
    model = NonScalarGradient().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    data, (y, gx) = _export(model, x.clone(), input_names=["x"], return_output=True)

    # PyTorch's values during the export: autograd with output gradients of ones.
    xr = x.clone().requires_grad_()
    want_y = torch.tanh(model.linear(xr))
    (want_gx,) = torch.autograd.grad(want_y, [xr], grad_outputs=torch.ones_like(want_y))
    torch.testing.assert_close(gx, want_gx)
    torch.testing.assert_close(y, want_y.detach())

    proto = onnx.load_from_string(data)
    onnx.checker.check_model(proto)
    (node,) = [n for n in proto.graph.node if n.op_type == "Gradient"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["xs"] == [b"x"]
    # y of the Gradient node is a scalar that onnxruntime computes from x: the output's sum,
    # whose derivative (central differences) is the gradient for output gradients of ones.
    value = _value_model(proto, "x", attrs["y"].decode())
    session = _session(value)

    def y_of(v: torch.Tensor) -> float:
        [out] = session.run(None, {"x": v.numpy()})
        assert numpy.asarray(out).shape == ()
        return float(out)

    assert y_of(x) == pytest.approx(float(want_y.detach().sum()), rel=1e-12)
    eps = 1e-6
    numeric = torch.zeros_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        step = step.view_as(x)
        numeric.view(-1)[i] = (y_of(x + step) - y_of(x - step)) / (2 * eps)
    torch.testing.assert_close(numeric, want_gx, rtol=1e-6, atol=1e-8)
    # The model's own output runs in onnxruntime too.
    _close(_run(_value_model(proto, "x", proto.graph.output[0].name), {"x": x})[0], want_y)
