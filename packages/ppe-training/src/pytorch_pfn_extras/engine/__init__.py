"""The trainer and evaluator engines: ``create_trainer`` and ``create_evaluator``."""

from __future__ import annotations

from pytorch_pfn_extras.engine._engine import (
    create_evaluator,
    create_trainer,
    filter_state_objects,
    filter_state_objects_dict,
)

__all__ = [
    "create_evaluator",
    "create_trainer",
    "filter_state_objects",
    "filter_state_objects_dict",
]
