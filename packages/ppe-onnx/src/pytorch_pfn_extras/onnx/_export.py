"""export: torch.onnx.export with outputs, stripped tensors and a quiet exporter."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import IO, Any, NamedTuple

import torch

from pytorch_pfn_extras.onnx import _torch_onnx
from pytorch_pfn_extras.onnx._deps import require_onnx
from pytorch_pfn_extras.onnx._inputs import ModelInputs, detached, model_inputs, returned_output
from pytorch_pfn_extras.onnx._strip import LARGE_TENSOR_DATA_THRESHOLD, strip_model
from pytorch_pfn_extras.onnx._trace import PhaseTrace


class Exported(NamedTuple):
    """What one export produced: the model (serialized and parsed), its inputs and output."""

    data: bytes
    proto: Any  # onnx.ModelProto
    inputs: ModelInputs
    input_names: list[str]
    output: Any


class _PPEOptions(NamedTuple):
    """The keyword arguments PPE 0.9 took besides torch.onnx.export's, with their defaults."""

    enable_onnx_checker: bool = False
    strip_doc_string: bool | None = None  # None: as the exporter does (kept only with verbose)
    custom_exporter: Callable[..., Any] | None = None


def _pop_ppe_options(options: dict[str, Any]) -> _PPEOptions:
    """Take PPE's own keyword arguments out of ``options`` (torch.onnx.export's)."""
    found = _PPEOptions(
        **{name: options.pop(name) for name in _PPEOptions._fields if name in options}
    )
    for name in ("enable_onnx_checker", "strip_doc_string"):
        value = getattr(found, name)
        if value is not None and not isinstance(value, bool):
            message = f"{name} must be a bool, got {type(value).__name__}: {value!r}"
            raise TypeError(message)
    exporter = found.custom_exporter
    if exporter is not None and not callable(exporter):
        message = (
            "custom_exporter must be a callable taking torch.onnx.export's arguments, got "
            f"{type(exporter).__name__}: {exporter!r}"
        )
        raise TypeError(message)
    return found


def _check_model(onnx: Any, proto: Any) -> None:
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as error:
        message = f"the exported model is not valid ONNX (enable_onnx_checker=True): {error}"
        raise onnx.checker.ValidationError(message) from error


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

    ``export_kwargs`` are torch.onnx.export's keyword arguments and PPE's own
    (``enable_onnx_checker``, ``strip_doc_string``, ``custom_exporter``); ``kwargs`` among them
    are the model's keyword inputs. The output keeps its autograd graph when ``output_grad``;
    without ``run`` the model is not run (the output is ``None``): only the exporter traces it.
    """
    onnx = require_onnx("pytorch_pfn_extras.onnx.export")
    options = dict(export_kwargs)
    ppe_options = _pop_ppe_options(options)
    inputs = model_inputs(args, options.pop("kwargs", None), model)
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
                output = detached(output)
        with trace.phase("export"):
            data = _torch_onnx.export_to_bytes(
                model,
                inputs.args,
                inputs.kwargs,
                {**options, "input_names": input_names},
                exporter=ppe_options.custom_exporter,
                strip_doc_string=ppe_options.strip_doc_string,
            )
    if not data and ppe_options.custom_exporter is not None:
        message = f"custom_exporter {ppe_options.custom_exporter!r} wrote nothing to its file f"
        raise RuntimeError(message)
    with trace.phase("parse"):
        proto = onnx.load_from_string(data)
    if ppe_options.enable_onnx_checker:
        with trace.phase("check"):
            _check_model(onnx, proto)
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
        args: A tensor or a tuple of inputs, each a tensor or a tuple/list of them (one graph
            input per tensor); a dict as the last item (or ``kwargs={...}``) gives keyword
            inputs.
        f: A path or a binary file object to write the model to.
        return_output: Return the model's output for ``args`` (PyTorch tensors, detached): a
            tensor as it is, any other output as the flat list of its tensors.
        strip_large_tensor_data: Strip the data of tensors with more than
            ``large_tensor_threshold`` elements (shapes and dtypes stay), for small files.
        large_tensor_threshold: See ``strip_large_tensor_data``.
        chrome_tracing: Write a Chrome trace of the export's phases to this path.
        **kwargs: torch.onnx.export's keyword arguments (``input_names``, ``dynamic_axes``,
            ``opset_version``, ...; nothing is printed unless ``verbose=True``), and:

            - ``training``: a ``torch.onnx.TrainingMode``, or a bool: ``False`` (the default)
              is ``EVAL``, ``True`` is ``TRAINING`` (export in training mode); ``PRESERVE``
              exports the model in its current mode.
            - ``enable_onnx_checker``: run ``onnx.checker.check_model`` on the exported model
              (``onnx.checker.ValidationError`` if it is invalid); default False, as models
              with :func:`annotate` attributes do not pass it.
            - ``strip_doc_string``: ``True`` removes the nodes' doc strings (their source
              locations), ``False`` keeps them; by default they are kept only with
              ``verbose=True``, as torch.onnx.export does.
            - ``custom_exporter``: a callable used instead of ``torch.onnx.export``, called
              with the arguments torch.onnx.export would get:
              ``custom_exporter(model, args, f, kwargs=..., dynamo=False, verbose=...,
              input_names=..., **the other keyword arguments)``, where ``args`` is the tuple of
              positional inputs, ``kwargs`` the keyword inputs (or None), ``training`` (if
              given) a ``torch.onnx.TrainingMode``, and ``f`` a binary file object to write
              the serialized ``ModelProto`` to. Its return value is ignored.

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
    return returned_output(exported.output) if return_output else None


def same_model(existing: Any, new: Any) -> bool:
    """Whether two ModelProtos hold the same graph (nodes, names, initializers)."""
    return bool(existing.graph.SerializeToString() == new.graph.SerializeToString())
