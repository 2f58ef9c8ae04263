"""Lazy access to CuPy and CUDA, with errors that say what to install."""

from __future__ import annotations

import sys
from types import ModuleType

import torch

INSTALL_HINT = 'pip install "ppe-runtime-cuda[cupy]"'

_cupy_missing = False


def import_cupy(feature: str) -> ModuleType:
    """Import CuPy for ``feature``, or raise an ImportError naming the extra."""
    try:
        import cupy
    except ImportError as exc:
        message = (
            f"{feature} needs CuPy: {INSTALL_HINT} (or the cupy-cuda* wheel matching "
            "your CUDA version)"
        )
        raise ImportError(message) from exc
    return cupy  # type: ignore[no-any-return]


def optional_cupy() -> ModuleType | None:
    """Return CuPy if it can be imported, else None (a failed import is not retried)."""
    global _cupy_missing
    module = sys.modules.get("cupy")
    if module is not None:
        return module
    if _cupy_missing or "cupy" in sys.modules:  # a None entry blocks the import
        return None
    try:
        import cupy
    except ImportError:
        _cupy_missing = True
        return None
    return cupy  # type: ignore[no-any-return]


def require_cuda(feature: str) -> None:
    """Raise a RuntimeError explaining why CUDA is unusable, if it is."""
    if torch.cuda.is_available():
        return
    if torch.version.cuda is None:
        reason = f"this PyTorch build ({torch.__version__}) has no CUDA support"
    else:
        reason = f"PyTorch (CUDA {torch.version.cuda}) finds no usable CUDA device"
    message = f"{feature} needs CUDA, but torch.cuda.is_available() is False: {reason}"
    raise RuntimeError(message)
