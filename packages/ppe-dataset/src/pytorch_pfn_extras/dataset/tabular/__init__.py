"""Building blocks for :class:`~pytorch_pfn_extras.dataset.TabularDataset`."""

from __future__ import annotations

from pytorch_pfn_extras.dataset.tabular._delegate import DelegateDataset

# Through the public module: importing a submodule binds it as an attribute of this package,
# so the module must be imported before the function takes the name ``from_data``.
from pytorch_pfn_extras.dataset.tabular.from_data import from_data

__all__ = [
    "DelegateDataset",
    "from_data",
]
