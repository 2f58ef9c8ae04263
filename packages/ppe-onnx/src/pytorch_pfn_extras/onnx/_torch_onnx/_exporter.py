"""The call of torch's TorchScript-based exporter, inside ppe-onnx's hooks."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from pytorch_pfn_extras.onnx._torch_onnx._hooks import exporter_hooks

EXPORTER = "torch-onnx-utils"
"""The name meta.json gives the exporter (PPE 0.9's name for torch.onnx's TorchScript exporter)."""

# Warnings the TorchScript exporter gives on every call whatever the model: its own deprecation
# (users asked for this exporter) and the RNN batch-size notice (raised even when the initial
# states are inputs, as it advises).
_QUIET: tuple[tuple[str, type[Warning]], ...] = (
    (r"You are using the legacy TorchScript-based ONNX export", DeprecationWarning),
    (r"The feature will be removed", DeprecationWarning),
    (r"Exporting a model to ONNX with a batch_size other than 1", UserWarning),
    # training=TrainingMode.TRAINING, which ppe-onnx takes as PPE 0.9 did
    (r"Setting `training` to something other than default is deprecated", DeprecationWarning),
)


def _training_mode(training: Any) -> Any:
    """The torch.onnx.TrainingMode for PPE 0.9's ``training``: None or False is EVAL, True is
    TRAINING (torch 2.13's exporter takes the enum only)."""
    if training is None or training is False:
        return torch.onnx.TrainingMode.EVAL
    if training is True:
        return torch.onnx.TrainingMode.TRAINING
    if isinstance(training, torch.onnx.TrainingMode):
        return training
    message = (
        "training must be a bool or a torch.onnx.TrainingMode (EVAL, TRAINING, PRESERVE), "
        f"got {type(training).__name__}: {training!r}"
    )
    raise TypeError(message)


@contextlib.contextmanager
def export_mode(model: torch.nn.Module, training: Any = None) -> Iterator[None]:
    """Put ``model`` in the train/eval mode that the exporter uses for ``training``."""
    mode = _training_mode(training)
    if mode == torch.onnx.TrainingMode.PRESERVE:
        yield
        return
    was_training = model.training
    model.train(mode == torch.onnx.TrainingMode.TRAINING)
    try:
        yield
    finally:
        model.train(was_training)


def export_to_bytes(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    export_kwargs: Mapping[str, Any],
    *,
    exporter: Callable[..., Any] | None = None,
    strip_doc_string: bool | None = None,
) -> bytes:
    """Export with the TorchScript-based exporter and return the serialized ModelProto.

    ``export_kwargs`` are torch.onnx.export's keyword arguments (``input_names``,
    ``dynamic_axes``, ``opset_version``, ...); ``verbose`` defaults to False and ``training``
    may be a bool. ``exporter``, called with the arguments torch.onnx.export would get (a
    binary file object as ``f``), replaces it. ``strip_doc_string`` None leaves the doc
    strings to the exporter (kept only with ``verbose``). The exporter runs with ppe-onnx's
    hooks (:func:`exporter_hooks`), taken out again when it returns or raises.
    """
    options = dict(export_kwargs)
    options.setdefault("verbose", False)
    options.pop("dynamo", None)
    if "training" in options:
        options["training"] = _training_mode(options["training"])
    # the TorchScript exporter writes to file objects too, whatever its type hints say
    export: Callable[..., Any] = torch.onnx.export if exporter is None else exporter
    buffer = io.BytesIO()
    with warnings.catch_warnings(), exporter_hooks(strip_doc_string):
        for message, category in _QUIET:
            warnings.filterwarnings("ignore", message=message, category=category)
        # torch's own modules (RNNs, attention) trip the tracer's warnings on every export;
        # the warnings that the user's code raises stay.
        tracer_warning = torch.jit.TracerWarning  # type: ignore[attr-defined]
        warnings.filterwarnings("ignore", category=tracer_warning, module=r"torch\.")
        export(
            model,
            args,
            buffer,
            kwargs=dict(kwargs) or None,
            dynamo=False,
            **options,
        )
    return buffer.getvalue()
