"""Distributed data parallelism: ``DistributedDataParallel``.

``pytorch_pfn_extras.nn.parallel.distributed`` also holds ``get_foreach_wrapper``.
"""

from __future__ import annotations

from pytorch_pfn_extras.nn.parallel import distributed as distributed
from pytorch_pfn_extras.nn.parallel._distributed import DistributedDataParallel

__all__ = [
    "DistributedDataParallel",
]
