"""Collect observed values (losses, metrics...) and summarize them without device syncs.

Example:
    >>> from pytorch_pfn_extras.reporting import Reporter, report
    >>> reporter = Reporter()
    >>> observation = {}
    >>> with reporter.scope(observation):
    ...     report({"loss": 0.25})
    >>> observation
    {'loss': 0.25}
"""

from pytorch_pfn_extras.reporting._reporter import (
    Observation,
    Reporter,
    Scalar,
    Value,
    get_current_reporter,
    report,
    report_scope,
)
from pytorch_pfn_extras.reporting._summary import DictSummary, Statistic, Summary

__all__ = [
    "DictSummary",
    "Observation",
    "Reporter",
    "Scalar",
    "Statistic",
    "Summary",
    "Value",
    "get_current_reporter",
    "report",
    "report_scope",
]
