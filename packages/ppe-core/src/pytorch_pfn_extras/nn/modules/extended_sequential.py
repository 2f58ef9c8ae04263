"""``ExtendedSequential``, at PPE's public module path."""

from __future__ import annotations

from pytorch_pfn_extras.nn._extended_sequential import ExtendedSequential

__all__ = [
    "ExtendedSequential",
]
