"""ManualScheduleTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.manual_schedule_trigger import (
    ...     ManualScheduleTrigger,
    ... )
    >>> manager.extend(extensions.snapshot(), trigger=ManualScheduleTrigger([10, 20], "epoch"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._manual_schedule_trigger import ManualScheduleTrigger

__all__ = [
    "ManualScheduleTrigger",
]
