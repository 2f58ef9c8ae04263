"""``LazyBatchNorm1d``, ``LazyBatchNorm2d`` and ``LazyBatchNorm3d``, at PPE's public module path."""

from __future__ import annotations

from pytorch_pfn_extras.nn._lazy_batchnorm import LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d

__all__ = [
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
]
