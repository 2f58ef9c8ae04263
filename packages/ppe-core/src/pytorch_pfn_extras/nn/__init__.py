"""Modules: lazily sized layers, tensor checks, a repeatable Sequential, and data parallelism.

``pytorch_pfn_extras.nn.parallel`` holds :class:`DistributedDataParallel`.
"""

from __future__ import annotations

from pytorch_pfn_extras.nn import parallel
from pytorch_pfn_extras.nn._ensure import Ensure, ensure
from pytorch_pfn_extras.nn._extended_sequential import ExtendedSequential
from pytorch_pfn_extras.nn._lazy import UninitializedParameter
from pytorch_pfn_extras.nn._lazy_modules import (
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyLinear,
)

__all__ = [
    "Ensure",
    "ExtendedSequential",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyLinear",
    "UninitializedParameter",
    "ensure",
    "parallel",
]
