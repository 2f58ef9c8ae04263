"""Every use of torch.onnx by export and export_testcase lives here.

The torch ONNX exporter changes between releases (torch 2.9 made the torch.export-based exporter
the default and deprecated the TorchScript-based one); when it moves again, this module is the one
to change. Tested with torch 2.13 and its TorchScript-based exporter (``dynamo=False``), whose
default opset is 20, which is what PPE 0.9 used ("torch-onnx-utils").
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch

EXPORTER = "torch-onnx-utils"
"""The name meta.json gives the exporter (PPE 0.9's name for torch.onnx's TorchScript exporter)."""

# Warnings the TorchScript exporter gives on every call whatever the model: its own deprecation
# (users asked for this exporter) and the RNN batch-size notice (raised even when the initial
# states are inputs, as it advises).
_QUIET: tuple[tuple[str, type[Warning]], ...] = (
    (r"You are using the legacy TorchScript-based ONNX export", DeprecationWarning),
    (r"The feature will be removed", DeprecationWarning),
    (r"Exporting a model to ONNX with a batch_size other than 1", UserWarning),
)


def _training_mode(training: Any) -> Any:
    return torch.onnx.TrainingMode.EVAL if training is None else training


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
) -> bytes:
    """Export with the TorchScript-based exporter and return the serialized ModelProto.

    ``export_kwargs`` are torch.onnx.export's keyword arguments (``input_names``,
    ``dynamic_axes``, ``opset_version``, ...); ``verbose`` defaults to False.
    """
    options = dict(export_kwargs)
    options.setdefault("verbose", False)
    options.pop("dynamo", None)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        for message, category in _QUIET:
            warnings.filterwarnings("ignore", message=message, category=category)
        # torch's own modules (RNNs, attention) trip the tracer's warnings on every export;
        # the warnings that the user's code raises stay.
        tracer_warning = torch.jit.TracerWarning  # type: ignore[attr-defined]
        warnings.filterwarnings("ignore", category=tracer_warning, module=r"torch\.")
        torch.onnx.export(
            model,
            args,
            buffer,  # type: ignore[arg-type]  # the TorchScript exporter writes to file objects
            kwargs=dict(kwargs) or None,
            dynamo=False,
            **options,
        )
    return buffer.getvalue()


def is_in_onnx_export() -> bool:
    """Whether a torch.onnx export is running (for code that behaves differently then)."""
    return bool(torch.onnx.is_in_onnx_export())
