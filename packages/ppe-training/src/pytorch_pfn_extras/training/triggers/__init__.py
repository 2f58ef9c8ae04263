"""Triggers: decide when an extension runs and when training stops."""

from __future__ import annotations

from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger
from pytorch_pfn_extras.training._trigger_util import Trigger
from pytorch_pfn_extras.training.triggers._best_value_trigger import (
    BestValueTrigger,
    MaxValueTrigger,
    MinValueTrigger,
)
from pytorch_pfn_extras.training.triggers._early_stopping_trigger import EarlyStoppingTrigger
from pytorch_pfn_extras.training.triggers._function_trigger import FunctionTrigger
from pytorch_pfn_extras.training.triggers._manual_schedule_trigger import ManualScheduleTrigger
from pytorch_pfn_extras.training.triggers._once_trigger import OnceTrigger
from pytorch_pfn_extras.training.triggers._time_trigger import TimeTrigger

__all__ = [
    "BestValueTrigger",
    "EarlyStoppingTrigger",
    "FunctionTrigger",
    "IntervalTrigger",
    "ManualScheduleTrigger",
    "MaxValueTrigger",
    "MinValueTrigger",
    "OnceTrigger",
    "TimeTrigger",
    "Trigger",
]
