"""BestValue, MaxValue and MinValue, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.best_value import MinValue
    >>> manager.extend(MinValue("val/loss"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._best_value import BestValue, MaxValue, MinValue

__all__ = [
    "BestValue",
    "MaxValue",
    "MinValue",
]
