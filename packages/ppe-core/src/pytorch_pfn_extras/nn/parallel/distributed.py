"""``DistributedDataParallel`` and ``get_foreach_wrapper``, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.nn.parallel.distributed import DistributedDataParallel
"""

from __future__ import annotations

from pytorch_pfn_extras.nn.parallel._distributed import DistributedDataParallel
from pytorch_pfn_extras.nn.parallel._foreach import get_foreach_wrapper

__all__ = [
    "DistributedDataParallel",
    "get_foreach_wrapper",
]
