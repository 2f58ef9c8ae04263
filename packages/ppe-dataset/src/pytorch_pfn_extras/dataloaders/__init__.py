"""Data loading helpers: :class:`DataLoader` and :mod:`~pytorch_pfn_extras.dataloaders.utils`."""

from __future__ import annotations

# PPE 0.9's public modules of this package are its attributes, as in 0.9 (each re-exports
# names of the private modules, so importing them costs next to nothing).
from pytorch_pfn_extras.dataloaders import (  # noqa: F401
    dataloader,
    utils,
)
from pytorch_pfn_extras.dataloaders._dataloader import DataLoader

__all__ = [
    "DataLoader",
    "utils",
]
