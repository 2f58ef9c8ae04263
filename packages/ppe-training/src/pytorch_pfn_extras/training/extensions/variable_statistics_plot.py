"""VariableStatisticsPlot and its helpers, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.variable_statistics_plot import (
    ...     VariableStatisticsPlot,
    ... )
    >>> manager.extend(VariableStatisticsPlot(model))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._variable_statistics_plot import (
    Reservoir,
    Statistician,
    VariableStatisticsPlot,
    matplotlib_savefun,
    percentile,
)

__all__ = [
    "Reservoir",
    "Statistician",
    "VariableStatisticsPlot",
    "matplotlib_savefun",
    "percentile",
]
