"""Building blocks for :class:`~pytorch_pfn_extras.dataset.TabularDataset`."""

from __future__ import annotations

from pytorch_pfn_extras.dataset.tabular._delegate import DelegateDataset
from pytorch_pfn_extras.dataset.tabular._from_data import from_data

__all__ = [
    "DelegateDataset",
    "from_data",
]
