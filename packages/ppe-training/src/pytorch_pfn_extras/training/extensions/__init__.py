"""Built-in extensions of the extensions manager."""

from __future__ import annotations

from pytorch_pfn_extras.training._extension import Extension
from pytorch_pfn_extras.training._snapshots._extension import (
    SnapshotMode,
    snapshot,
    snapshot_object,
)

# PPE 0.9's public modules of this package are its attributes, as in 0.9 (each re-exports
# names of the private modules, so importing them costs next to nothing).
from pytorch_pfn_extras.training.extensions import (  # noqa: F401
    best_value,
    evaluator,
    fail_on_non_number,
    log_report,
    lr_scheduler,
    micro_average,
    parameter_statistics,
    plot_report,
    print_report,
    print_report_notebook,
    profile_report,
    progress_bar,
    progress_bar_notebook,
    slack,
    snapshot_writers,
    timeline_trace,
    util,
    value_observation,
    variable_statistics_plot,
)
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
from pytorch_pfn_extras.training.extensions._preemption import PreemptionHandler
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
    "PreemptionHandler",
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
