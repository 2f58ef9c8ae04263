"""PrintReportNotebook, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.print_report_notebook import (
    ...     PrintReportNotebook,
    ... )
    >>> manager.extend(PrintReportNotebook(["epoch", "train/loss"]))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._print_report import PrintReportNotebook

__all__ = [
    "PrintReportNotebook",
]
