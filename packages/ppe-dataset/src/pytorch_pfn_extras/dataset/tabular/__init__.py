"""Building blocks for :class:`~pytorch_pfn_extras.dataset.TabularDataset`."""

from __future__ import annotations

# PPE 0.9's public modules of this package are its attributes, as in 0.9 (each re-exports
# names of the private modules, so importing them costs next to nothing).
from pytorch_pfn_extras.dataset.tabular import (  # noqa: F401
    _tabular_dataset,
    delegate_dataset,
    tabular_dataset,
)
from pytorch_pfn_extras.dataset.tabular._concat import Concat
from pytorch_pfn_extras.dataset.tabular._delegate import DelegateDataset
from pytorch_pfn_extras.dataset.tabular._join import Join
from pytorch_pfn_extras.dataset.tabular._transform import Transform
from pytorch_pfn_extras.dataset.tabular._view import View

# Through the public module: importing a submodule binds it as an attribute of this package,
# so the module must be imported before the function takes the name ``from_data``.
from pytorch_pfn_extras.dataset.tabular.from_data import from_data

# TabularDataset's operations build these (subclasses of it: its module cannot import them).
_tabular_dataset.use_derived(view=View, concat=Concat, join=Join, transform=Transform)
del Concat, Join, Transform, View

__all__ = [
    "DelegateDataset",
    "from_data",
]
