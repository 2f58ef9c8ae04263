"""DelegateDataset, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.dataset.tabular.delegate_dataset import DelegateDataset
"""

from __future__ import annotations

from pytorch_pfn_extras.dataset.tabular._delegate import DelegateDataset

__all__ = [
    "DelegateDataset",
]
