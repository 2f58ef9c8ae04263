"""IntervalTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.interval_trigger import IntervalTrigger
    >>> manager.extend(extensions.LogReport(), trigger=IntervalTrigger(100, "iteration"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger

__all__ = [
    "IntervalTrigger",
]
