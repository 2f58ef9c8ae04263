"""Import onnx and onnxruntime when a feature needs them, with the fix in the message."""

from __future__ import annotations

import importlib
from types import ModuleType


def require_onnx(feature: str) -> ModuleType:
    """Return the ``onnx`` module, or raise an ImportError saying what to install."""
    try:
        return importlib.import_module("onnx")
    except ImportError as error:
        message = f"{feature} needs the onnx package: pip install ppe-onnx (or pip install onnx)"
        raise ImportError(message) from error


def require_onnxruntime(feature: str) -> ModuleType:
    """Return the ``onnxruntime`` module, or raise an ImportError saying what to install."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as error:
        message = f'{feature} needs onnxruntime: pip install "ppe-onnx[runtime]"'
        raise ImportError(message) from error
