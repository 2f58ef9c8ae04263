"""Datasets: :class:`TabularDataset` (lazy, composable tables) and :class:`SharedDataset`."""

from __future__ import annotations

from pytorch_pfn_extras.dataset import tabular
from pytorch_pfn_extras.dataset._shared_dataset import (
    InfiniteCache,
    ItemNotFoundException,
    SharedDataset,
)
from pytorch_pfn_extras.dataset._version import __version__
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import TabularDataset

__all__ = [
    "InfiniteCache",
    "ItemNotFoundException",
    "SharedDataset",
    "TabularDataset",
    "__version__",
    "tabular",
]
