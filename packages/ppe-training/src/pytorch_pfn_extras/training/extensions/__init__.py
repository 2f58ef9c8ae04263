"""Built-in extensions of the extensions manager."""

from __future__ import annotations

from pytorch_pfn_extras.training._extension import Extension
from pytorch_pfn_extras.training.extensions._best_value import BestValue, MaxValue, MinValue
from pytorch_pfn_extras.training.extensions._evaluator import (
    DistributedEvaluator,
    Evaluator,
    IgniteEvaluator,
)
from pytorch_pfn_extras.training.extensions._fail_on_non_number import FailOnNonNumber
from pytorch_pfn_extras.training.extensions._log_report import LogReport
from pytorch_pfn_extras.training.extensions._lr_scheduler import LRScheduler
from pytorch_pfn_extras.training.extensions._micro_average import MicroAverage
from pytorch_pfn_extras.training.extensions._parameter_statistics import ParameterStatistics
from pytorch_pfn_extras.training.extensions._plot_report import PlotReport
from pytorch_pfn_extras.training.extensions._print_report import (
    PrintReport,
    PrintReportNotebook,
)
from pytorch_pfn_extras.training.extensions._print_report_cli import PrintReportCLI
from pytorch_pfn_extras.training.extensions._profile_report import ProfileReport
from pytorch_pfn_extras.training.extensions._progress_bar import (
    ProgressBar,
    ProgressBarNotebook,
)
from pytorch_pfn_extras.training.extensions._progress_bar_cli import ProgressBarCLI
from pytorch_pfn_extras.training.extensions._slack import Slack, SlackWebhook
from pytorch_pfn_extras.training.extensions._snapshot import (
    SnapshotMode,
    snapshot,
    snapshot_object,
)
from pytorch_pfn_extras.training.extensions._timeline_trace import TimelineTrace
from pytorch_pfn_extras.training.extensions._value_observation import (
    observe_lr,
    observe_value,
)
from pytorch_pfn_extras.training.extensions._variable_statistics_plot import VariableStatisticsPlot
from pytorch_pfn_extras.training.extensions.accumulate import (
    AverageAccumulate,
    MaxAccumulate,
    MinAccumulate,
    StandardDeviationAccumulate,
    UnbiasedStandardDeviationAccumulate,
)

__all__ = [
    "AverageAccumulate",
    "BestValue",
    "DistributedEvaluator",
    "Evaluator",
    "Extension",
    "FailOnNonNumber",
    "IgniteEvaluator",
    "LRScheduler",
    "LogReport",
    "MaxAccumulate",
    "MaxValue",
    "MicroAverage",
    "MinAccumulate",
    "MinValue",
    "ParameterStatistics",
    "PlotReport",
    "PrintReport",
    "PrintReportCLI",
    "PrintReportNotebook",
    "ProfileReport",
    "ProgressBar",
    "ProgressBarCLI",
    "ProgressBarNotebook",
    "Slack",
    "SlackWebhook",
    "StandardDeviationAccumulate",
    "TimelineTrace",
    "UnbiasedStandardDeviationAccumulate",
    "VariableStatisticsPlot",
    "observe_lr",
    "observe_value",
    "SnapshotMode",
    "snapshot",
    "snapshot_object",
]
