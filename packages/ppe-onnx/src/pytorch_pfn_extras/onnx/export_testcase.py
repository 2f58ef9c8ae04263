"""export_testcase: an ONNX model with its inputs, outputs and gradients, in ONNX's test layout.

``out_dir/model.onnx``, ``out_dir/test_data_set_N/input_i.pb`` (named after the graph inputs),
``output_i.pb``, with ``output_grad`` ``gradient_input_i.pb`` (the output gradients) and
``gradient_j.pb`` (one per parameter, in ``named_parameters()`` order, named after it), and
``out_dir/meta.json``: the layout PPE 0.9 writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pytorch_pfn_extras.onnx._check import check_with_onnxruntime
from pytorch_pfn_extras.onnx._export import Exported, export, export_model, same_model
from pytorch_pfn_extras.onnx._inputs import flatten_outputs, returned_output
from pytorch_pfn_extras.onnx._meta import write_meta
from pytorch_pfn_extras.onnx._strip import LARGE_TENSOR_DATA_THRESHOLD
from pytorch_pfn_extras.onnx._trace import PhaseTrace

__all__ = ["LARGE_TENSOR_DATA_THRESHOLD", "export", "export_testcase"]

_DATA_SET = re.compile(r"test_data_set_(\d+)$")


def _next_data_set(out_dir: str) -> str:
    numbers = [int(m.group(1)) for e in os.listdir(out_dir) if (m := _DATA_SET.match(e))]
    return os.path.join(out_dir, f"test_data_set_{max(numbers, default=-1) + 1}")


def _write_tensor(path: str, tensor: torch.Tensor, name: str = "") -> Any:
    from onnx import numpy_helper

    array = tensor.detach().cpu().numpy()
    with open(path, "wb") as file:
        file.write(numpy_helper.from_array(array, name).SerializeToString())
    return array


def _graph_feeds(exported: Exported) -> dict[str, torch.Tensor]:
    """The model's input tensors by graph input name, in the graph's order (inputs that the
    exporter dropped or that are initializers are left out)."""
    by_name = dict(zip(exported.input_names, exported.inputs.tensors()))
    initializers = {t.name for t in exported.proto.graph.initializer}
    return {
        i.name: by_name[i.name]
        for i in exported.proto.graph.input
        if i.name in by_name and i.name not in initializers
    }


def _output_gradients(output_grad: Any, outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if output_grad is True:
        return [torch.ones_like(o) for o in outputs]
    given = [output_grad] if isinstance(output_grad, torch.Tensor) else list(output_grad)
    if len(given) != len(outputs):
        message = f"output_grad gives {len(given)} gradients for {len(outputs)} outputs"
        raise ValueError(message)
    return given


def _write_gradients(
    model: torch.nn.Module, data_dir: str, output_grad: Any, outputs: Sequence[torch.Tensor]
) -> None:
    grads_out = _output_gradients(output_grad, outputs)
    for i, grad_out in enumerate(grads_out):
        _write_tensor(os.path.join(data_dir, f"gradient_input_{i}.pb"), grad_out)
    named = list(model.named_parameters())
    trainable = [p for _, p in named if p.requires_grad]
    pairs = [(o, g) for o, g in zip(outputs, grads_out) if o.requires_grad]
    grads = (
        torch.autograd.grad(
            [o for o, _ in pairs], trainable, [g for _, g in pairs], allow_unused=True
        )
        if pairs and trainable
        else [None] * len(trainable)
    )
    by_param: dict[int, torch.Tensor | None] = {id(p): g for p, g in zip(trainable, grads)}
    for j, (name, param) in enumerate(named):
        grad = by_param.get(id(param))
        value = torch.zeros_like(param) if grad is None else grad
        _write_tensor(os.path.join(data_dir, f"gradient_{j}.pb"), value, name)


def _save_torch_models(
    model: torch.nn.Module, exported: Exported, out_dir: str, *, script: bool, trace: bool
) -> None:
    if script:
        torch.jit.script(model).save(  # type: ignore[no-untyped-call]
            os.path.join(out_dir, "model_script.pt")
        )
    if trace:
        inputs = exported.inputs
        traced = torch.jit.trace(  # type: ignore[no-untyped-call]
            model, inputs.args, example_kwarg_inputs=inputs.kwargs or None
        )
        traced.save(os.path.join(out_dir, "model_trace.pt"))


def export_testcase(
    model: torch.nn.Module,
    args: Any,
    out_dir: str,
    *,
    output_grad: bool | torch.Tensor = False,
    metadata: bool = True,
    model_overwrite: bool = True,
    strip_large_tensor_data: bool = False,
    large_tensor_threshold: int = LARGE_TENSOR_DATA_THRESHOLD,
    return_output: bool = False,
    user_meta: Mapping[str, Any] | None = None,
    export_torch_script: bool = False,
    export_torch_trace: bool = False,
    export_chrome_tracing: bool = True,
    check: bool = False,
    **kwargs: Any,
) -> Any:
    """Export ``model`` and its inputs and outputs for ``args`` as an ONNX test case.

    Args:
        model: The module to export.
        args: A tensor or a tuple of inputs, each a tensor or a tuple/list of them (one graph
            input per tensor); a dict as the last item (or ``kwargs={...}``) gives keyword
            inputs.
        out_dir: The test case directory; a second call adds ``test_data_set_1``, and so on.
        output_grad: Also write the gradients of the parameters (``gradient_j.pb``) for output
            gradients of ones (``True``) or the given tensor(s) (``gradient_input_i.pb``).
        metadata: Write ``meta.json`` (time, directory, exporter, versions, git commit).
        model_overwrite: Write ``model.onnx`` even if it exists. With False, an existing
            ``model.onnx`` stays, and it must hold the same model (else ValueError).
        strip_large_tensor_data: Strip the data of tensors with more than
            ``large_tensor_threshold`` elements from ``model.onnx`` (not from the test data).
        large_tensor_threshold: See ``strip_large_tensor_data``.
        return_output: Return the model's output for ``args``: a tensor as it is, any other
            output as the flat list of its tensors.
        user_meta: JSON-serializable metadata stored under ``user_meta`` in ``meta.json``.
        export_torch_script: Also save ``model_script.pt`` (``torch.jit.script``).
        export_torch_trace: Also save ``model_trace.pt`` (``torch.jit.trace``).
        export_chrome_tracing: Write ``export_trace.json.gz``, a Chrome trace of the phases.
        check: Run ``model.onnx`` in onnxruntime on the saved inputs and raise RuntimeError,
            naming the output and the largest difference, where it does not match PyTorch.
        **kwargs: torch.onnx.export's keyword arguments (``input_names``, ``dynamic_axes``,
            ``opset_version``, ...; nothing is printed unless ``verbose=True``), and
            ``training``, ``enable_onnx_checker``, ``strip_doc_string`` and
            ``custom_exporter``, as for :func:`export`.

    Example:
        >>> export_testcase(torch.nn.Linear(5, 10), torch.zeros(2, 5), "out")  # doctest: +SKIP

    Warning:
        This function is not thread safe.
    """
    os.makedirs(out_dir, exist_ok=True)
    trace = PhaseTrace()
    exported = export_model(
        model,
        args,
        kwargs,
        strip_large_tensor_data=strip_large_tensor_data,
        large_tensor_threshold=large_tensor_threshold,
        trace=trace,
        output_grad=output_grad is not False,
    )
    model_path = os.path.join(out_dir, "model.onnx")
    with trace.phase("write model"):
        if model_overwrite or not os.path.exists(model_path):
            with open(model_path, "wb") as file:
                file.write(exported.data)
        else:
            from pytorch_pfn_extras.onnx.load import load_model

            if not same_model(load_model(model_path, load_external_data=False), exported.proto):
                message = (
                    f"{model_path} holds a different model than the one given, and "
                    "model_overwrite=False keeps it: the new test data would not match it; "
                    "pass model_overwrite=True or another out_dir"
                )
                raise ValueError(message)
    outputs = flatten_outputs(exported.output)
    data_dir = _next_data_set(out_dir)
    os.makedirs(data_dir)
    with trace.phase("write tensors"):
        feeds = {
            name: _write_tensor(os.path.join(data_dir, f"input_{i}.pb"), tensor, name)
            for i, (name, tensor) in enumerate(_graph_feeds(exported).items())
        }
        expected = [
            _write_tensor(os.path.join(data_dir, f"output_{i}.pb"), out)
            for i, out in enumerate(outputs)
        ]
        if output_grad is not False:
            _write_gradients(model, data_dir, output_grad, outputs)
    _save_torch_models(
        model, exported, out_dir, script=export_torch_script, trace=export_torch_trace
    )
    if metadata:
        write_meta(out_dir, strip_large_tensor_data=strip_large_tensor_data, user_meta=user_meta)
    if export_chrome_tracing:
        trace.write(os.path.join(out_dir, "export_trace.json.gz"))
    if check:
        if strip_large_tensor_data:
            message = "check=True cannot run a stripped model; unstrip it or export unstripped"
            raise ValueError(message)
        output_names = [o.name for o in exported.proto.graph.output]
        check_with_onnxruntime(exported.data, feeds, expected, output_names)
    return returned_output(exported.output) if return_output else None
