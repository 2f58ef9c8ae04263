"""``LazyLinear``, at PPE's public module path."""

from __future__ import annotations

from pytorch_pfn_extras.nn._lazy_linear import LazyLinear

__all__ = [
    "LazyLinear",
]
