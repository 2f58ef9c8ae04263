"""ParameterStatistics, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.parameter_statistics import (
    ...     ParameterStatistics,
    ... )
    >>> manager.extend(ParameterStatistics(model, prefix="stats"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._parameter_statistics import ParameterStatistics

__all__ = [
    "ParameterStatistics",
]
