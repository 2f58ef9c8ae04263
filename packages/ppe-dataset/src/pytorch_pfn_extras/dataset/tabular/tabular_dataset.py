"""TabularDataset, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.dataset.tabular.tabular_dataset import TabularDataset
"""

from __future__ import annotations

from pytorch_pfn_extras.dataset.tabular._tabular_dataset import TabularDataset

__all__ = [
    "TabularDataset",
]
