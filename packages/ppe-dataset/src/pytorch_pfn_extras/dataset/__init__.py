"""Datasets: :class:`TabularDataset` (lazy, composable tables) and :class:`SharedDataset`."""

from __future__ import annotations

# PPE 0.9's public modules of this package are its attributes, as in 0.9 (each re-exports
# names of the private modules, so importing them costs next to nothing).
from pytorch_pfn_extras.dataset import (  # noqa: F401
    shared_dataset,
    tabular,
)
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
