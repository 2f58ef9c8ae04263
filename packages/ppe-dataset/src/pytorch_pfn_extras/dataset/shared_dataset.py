"""SharedDataset and its caches, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.dataset.shared_dataset import InfiniteCache, SharedDataset
    >>> dataset = MyImages(paths)  # a SharedDataset subclass
"""

from __future__ import annotations

from pytorch_pfn_extras.dataset._shared_dataset import (
    Cache,
    InfiniteCache,
    ItemNotFoundException,
    SharedDataset,
)

__all__ = [
    "Cache",
    "InfiniteCache",
    "ItemNotFoundException",
    "SharedDataset",
]
