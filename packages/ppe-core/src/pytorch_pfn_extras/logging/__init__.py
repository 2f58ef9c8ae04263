"""Loggers of PPE and of applications built on it: children of the ``"ppe"`` logger."""

from __future__ import annotations

from pytorch_pfn_extras.logging._logger import get_logger

__all__ = [
    "get_logger",
]
