"""``LazyConv1d``, ``LazyConv2d`` and ``LazyConv3d``, at PPE's public module path."""

from __future__ import annotations

from pytorch_pfn_extras.nn._lazy_conv import LazyConv1d, LazyConv2d, LazyConv3d

__all__ = [
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
]
