"""Triggers: decide when an extension runs and when training stops."""

from __future__ import annotations

from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger
from pytorch_pfn_extras.training._trigger_util import Trigger

# PPE 0.9's public modules of this package are its attributes, as in 0.9 (each re-exports
# names of the private modules, so importing them costs next to nothing).
from pytorch_pfn_extras.training.triggers import (  # noqa: F401
    early_stopping_trigger,
    function_trigger,
    interval_trigger,
    manual_schedule_trigger,
    minmax_value_trigger,
    once_trigger,
    time_trigger,
)
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
