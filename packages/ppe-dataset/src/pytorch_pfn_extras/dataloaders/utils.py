"""Collate helpers for DataLoaders."""

from __future__ import annotations

from pytorch_pfn_extras.dataloaders._collate import CollateAsDict

__all__ = [
    "CollateAsDict",
]
