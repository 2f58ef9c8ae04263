"""EarlyStoppingTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.early_stopping_trigger import EarlyStoppingTrigger
    >>> manager = ExtensionsManager(..., stop_trigger=EarlyStoppingTrigger(monitor="val/loss"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._early_stopping_trigger import EarlyStoppingTrigger

__all__ = [
    "EarlyStoppingTrigger",
]
