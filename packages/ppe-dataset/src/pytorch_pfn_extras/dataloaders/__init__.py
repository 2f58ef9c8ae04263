"""Data loading helpers: :class:`DataLoader` and :mod:`~pytorch_pfn_extras.dataloaders.utils`."""

from __future__ import annotations

from pytorch_pfn_extras.dataloaders import utils
from pytorch_pfn_extras.dataloaders._dataloader import DataLoader

__all__ = [
    "DataLoader",
    "utils",
]
