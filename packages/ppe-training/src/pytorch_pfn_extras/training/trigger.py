"""Trigger utilities: :func:`get_trigger`, the :class:`Trigger` base class and IntervalTrigger.

PPE 0.9 keeps :class:`~pytorch_pfn_extras.training.triggers.IntervalTrigger` here too, the
trigger that a ``(period, unit)`` tuple becomes.
"""

from __future__ import annotations

from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger
from pytorch_pfn_extras.training._trigger_util import (
    Trigger,
    TriggerLike,
    UnitLiteral,
    get_trigger,
)

__all__ = [
    "IntervalTrigger",
    "Trigger",
    "TriggerLike",
    "UnitLiteral",
    "get_trigger",
]
