"""ONNX export with test cases, annotations and stripped large tensors.

Importing this package does not import onnx; the functions do, when called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

# These modules import torch only; torch.onnx internals load at the first export
# (pytorch_pfn_extras.onnx._torch_onnx).
from pytorch_pfn_extras.onnx import lax, symbolic_registry
from pytorch_pfn_extras.onnx._outputs import as_output, grad, no_grad
from pytorch_pfn_extras.onnx._strip import is_large_tensor

# From the public module, so that importing it later does not replace the function `annotate`.
from pytorch_pfn_extras.onnx.annotate import annotate, apply_annotation, scoped_anchor
from pytorch_pfn_extras.onnx.export_testcase import (
    LARGE_TENSOR_DATA_THRESHOLD,
    export,
    export_testcase,
)
from pytorch_pfn_extras.onnx.load import load_model

available: bool = importlib.util.find_spec("onnx") is not None
"""Whether the onnx package can be imported (every function here needs it)."""

__all__ = [
    "LARGE_TENSOR_DATA_THRESHOLD",
    "annotate",
    "apply_annotation",
    "as_output",
    "available",
    "export",
    "export_testcase",
    "grad",
    "is_large_tensor",
    "lax",
    "load_model",
    "no_grad",
    "scoped_anchor",
    "symbolic_registry",
]

# PPE 0.9's command-line modules (``python -m pytorch_pfn_extras.onnx.strip_large_tensor``) are
# attributes too, imported at their first use: imported here, ``python -m`` would warn that the
# module it runs was imported already.
_COMMAND_MODULES = frozenset({"strip_large_tensor", "unstrip_tensor"})

if not TYPE_CHECKING:  # type checkers see only the names above, and report a misspelt one

    def __getattr__(name: str) -> Any:
        """Import a command-line module at its first use as an attribute (PEP 562)."""
        if name in _COMMAND_MODULES:
            return importlib.import_module(f"{__name__}.{name}")  # which binds it here
        message = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(message)


def __dir__() -> list[str]:
    return sorted(set(globals()) | _COMMAND_MODULES)
