"""BestValueTrigger, MaxValueTrigger and MinValueTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.minmax_value_trigger import MaxValueTrigger
    >>> manager.extend(extensions.snapshot(), trigger=MaxValueTrigger("val/accuracy"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._best_value_trigger import (
    BestValueTrigger,
    MaxValueTrigger,
    MinValueTrigger,
)

__all__ = [
    "BestValueTrigger",
    "MaxValueTrigger",
    "MinValueTrigger",
]
