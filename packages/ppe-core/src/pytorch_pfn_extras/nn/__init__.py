"""Modules: lazily sized layers, tensor checks, a repeatable Sequential, and data parallelism.

``pytorch_pfn_extras.nn.parallel`` holds :class:`DistributedDataParallel`;
``pytorch_pfn_extras.nn.modules`` holds PPE's module paths of the names below and of the
lazy-module machinery (``nn.modules.lazy.LazyInitializationMixin``).
"""

from __future__ import annotations

from pytorch_pfn_extras.nn import modules, parallel
from pytorch_pfn_extras.nn._ensure import Ensure, ensure
from pytorch_pfn_extras.nn._extended_sequential import ExtendedSequential
from pytorch_pfn_extras.nn._lazy import UninitializedParameter
from pytorch_pfn_extras.nn._lazy_batchnorm import LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d
from pytorch_pfn_extras.nn._lazy_conv import LazyConv1d, LazyConv2d, LazyConv3d
from pytorch_pfn_extras.nn._lazy_linear import LazyLinear

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
    "modules",
    "parallel",
]
