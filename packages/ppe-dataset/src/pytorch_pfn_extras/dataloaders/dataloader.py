"""DataLoader, at PPE's public module path.

In PPE 0.9 this module holds torch's ``DataLoader``; ours is a subclass taking the same
arguments (see :class:`pytorch_pfn_extras.dataloaders.DataLoader`).

Example:
    >>> from pytorch_pfn_extras.dataloaders.dataloader import DataLoader
    >>> loader = DataLoader(table, batch_size=32, shuffle=True)
"""

from __future__ import annotations

from pytorch_pfn_extras.dataloaders._dataloader import DataLoader

__all__ = [
    "DataLoader",
]
