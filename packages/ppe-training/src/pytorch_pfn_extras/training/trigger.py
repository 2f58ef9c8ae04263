"""Trigger utilities: :func:`get_trigger` and the :class:`Trigger` base class."""

from __future__ import annotations

from pytorch_pfn_extras.training._trigger_util import (
    Trigger,
    TriggerLike,
    UnitLiteral,
    get_trigger,
)

__all__ = [
    "Trigger",
    "TriggerLike",
    "UnitLiteral",
    "get_trigger",
]
