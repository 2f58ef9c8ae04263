"""export: torch.onnx.export with outputs, stripped tensors and a quiet exporter."""

from __future__ import annotations

import contextlib
import os
from typing import IO, Any, NamedTuple

import torch

from pytorch_pfn_extras.onnx import _torch_onnx
from pytorch_pfn_extras.onnx._deps import require_onnx
from pytorch_pfn_extras.onnx._inputs import ModelInputs, model_inputs
from pytorch_pfn_extras.onnx._strip import LARGE_TENSOR_DATA_THRESHOLD, strip_model
from pytorch_pfn_extras.onnx._trace import PhaseTrace


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple | list):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


class Exported(NamedTuple):
    """What one export produced: the model (serialized and parsed), its inputs and output."""

    data: bytes
    proto: Any  # onnx.ModelProto
    inputs: ModelInputs
    input_names: list[str]
    output: Any


def export_model(
    model: torch.nn.Module,
    args: Any,
    export_kwargs: dict[str, Any],
    *,
    strip_large_tensor_data: bool,
    large_tensor_threshold: int,
    trace: PhaseTrace,
    output_grad: bool = False,
    run: bool = True,
) -> Exported:
    """Run ``model`` once (in the mode the exporter uses) and export it.

    ``export_kwargs`` are torch.onnx.export's keyword arguments; ``kwargs`` among them are the
    model's keyword inputs. The output keeps its autograd graph when ``output_grad``; without
    ``run`` the model is not run (the output is ``None``): only the exporter traces it.
    """
    onnx = require_onnx("pytorch_pfn_extras.onnx.export")
    options = dict(export_kwargs)
    inputs = model_inputs(args, options.pop("kwargs", None))
    input_names = inputs.names(options.pop("input_names", None))
    with _torch_onnx.export_mode(model, options.get("training")):
        output = None
        if run:
            # In the caller's grad mode, as the exporter's own run (a model may differentiate
            # inside forward); the output keeps its autograd graph only for output_grad.
            grad_mode = torch.enable_grad() if output_grad else contextlib.nullcontext()
            with trace.phase("run"), grad_mode:
                output = model(*inputs.args, **inputs.kwargs)
            if not output_grad:
                output = _detached(output)
        with trace.phase("export"):
            data = _torch_onnx.export_to_bytes(
                model, inputs.args, inputs.kwargs, {**options, "input_names": input_names}
            )
    with trace.phase("parse"):
        proto = onnx.load_from_string(data)
    if strip_large_tensor_data:
        with trace.phase("strip"):
            strip_model(proto, large_tensor_threshold)
            data = proto.SerializeToString()
    return Exported(data, proto, inputs, input_names, output)


def write_bytes(data: bytes, f: str | os.PathLike[str] | IO[bytes]) -> None:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as file:
            file.write(data)
    else:
        f.write(data)


def export(
    model: torch.nn.Module,
    args: Any,
    f: str | os.PathLike[str] | IO[bytes],
    return_output: bool = False,
    strip_large_tensor_data: bool = False,
    large_tensor_threshold: int = LARGE_TENSOR_DATA_THRESHOLD,
    chrome_tracing: str = "",
    **kwargs: Any,
) -> Any:
    """Export ``model`` to ONNX, as ``torch.onnx.export`` (TorchScript-based exporter) does.

    Args:
        model: The module to export.
        args: A tensor or a tuple of tensors; a dict as the last item (or ``kwargs={...}``)
            gives keyword inputs.
        f: A path or a binary file object to write the model to.
        return_output: Return the model's output (PyTorch tensors) for ``args``.
        strip_large_tensor_data: Strip the data of tensors with more than
            ``large_tensor_threshold`` elements (shapes and dtypes stay), for small files.
        large_tensor_threshold: See ``strip_large_tensor_data``.
        chrome_tracing: Write a Chrome trace of the export's phases to this path.
        **kwargs: torch.onnx.export's keyword arguments (``input_names``, ``dynamic_axes``,
            ``opset_version``, ...). Nothing is printed unless ``verbose=True``.

    Example:
        >>> buffer = io.BytesIO()  # doctest: +SKIP
        >>> export(torch.nn.Linear(5, 10), torch.zeros(2, 5), buffer)  # doctest: +SKIP

    Warning:
        This function is not thread safe.
    """
    trace = PhaseTrace()
    exported = export_model(
        model,
        args,
        kwargs,
        strip_large_tensor_data=strip_large_tensor_data,
        large_tensor_threshold=large_tensor_threshold,
        trace=trace,
        run=return_output,  # the outputs are PyTorch's own run: only when they are returned
    )
    with trace.phase("write"):
        write_bytes(exported.data, f)
    if chrome_tracing:
        trace.write(chrome_tracing)
    return exported.output if return_output else None


def same_model(existing: Any, new: Any) -> bool:
    """Whether two ModelProtos hold the same graph (nodes, names, initializers)."""
    return bool(existing.graph.SerializeToString() == new.graph.SerializeToString())
