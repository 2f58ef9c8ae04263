"""The extensions managers, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.manager import ExtensionsManager
    >>> manager = ExtensionsManager(model, optimizer, 10, iters_per_epoch=len(loader))
"""

from __future__ import annotations

from pytorch_pfn_extras.training._ignite_manager import IgniteExtensionsManager
from pytorch_pfn_extras.training._manager import ExtensionsManager

__all__ = ["ExtensionsManager", "IgniteExtensionsManager"]
