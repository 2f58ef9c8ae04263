"""Distributed data parallelism: ``DistributedDataParallel``."""

from __future__ import annotations

from pytorch_pfn_extras.nn.parallel._distributed import DistributedDataParallel

__all__ = [
    "DistributedDataParallel",
]
