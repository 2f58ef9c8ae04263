"""Built-in extensions of the extensions manager."""

from __future__ import annotations

from pytorch_pfn_extras.training._extension import Extension
from pytorch_pfn_extras.training.extensions._evaluator import Evaluator, IgniteEvaluator
from pytorch_pfn_extras.training.extensions._log_report import LogReport
from pytorch_pfn_extras.training.extensions._lr_scheduler import LRScheduler
from pytorch_pfn_extras.training.extensions._plot_report import PlotReport
from pytorch_pfn_extras.training.extensions._print_report import (
    PrintReport,
    PrintReportNotebook,
)
from pytorch_pfn_extras.training.extensions._progress_bar import (
    ProgressBar,
    ProgressBarNotebook,
)
from pytorch_pfn_extras.training.extensions._snapshot import (
    snapshot,
    snapshot_object,
)
from pytorch_pfn_extras.training.extensions._value_observation import (
    observe_lr,
    observe_value,
)
from pytorch_pfn_extras.training.extensions.accumulate import (
    AverageAccumulate,
    MaxAccumulate,
    MinAccumulate,
    StandardDeviationAccumulate,
    UnbiasedStandardDeviationAccumulate,
)

__all__ = [
    "AverageAccumulate",
    "Evaluator",
    "Extension",
    "IgniteEvaluator",
    "LRScheduler",
    "LogReport",
    "MaxAccumulate",
    "MinAccumulate",
    "PlotReport",
    "PrintReport",
    "PrintReportNotebook",
    "ProgressBar",
    "ProgressBarNotebook",
    "StandardDeviationAccumulate",
    "UnbiasedStandardDeviationAccumulate",
    "observe_lr",
    "observe_value",
    "snapshot",
    "snapshot_object",
]
