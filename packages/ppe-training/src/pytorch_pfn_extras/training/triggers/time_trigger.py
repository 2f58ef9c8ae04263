"""TimeTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.time_trigger import TimeTrigger
    >>> manager.extend(extensions.snapshot(), trigger=TimeTrigger(3600))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._time_trigger import TimeTrigger

__all__ = [
    "TimeTrigger",
]
