"""ProgressBarNotebook, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.progress_bar_notebook import (
    ...     ProgressBarNotebook,
    ... )
    >>> manager.extend(ProgressBarNotebook(update_interval=10))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._progress_bar import ProgressBarNotebook

__all__ = [
    "ProgressBarNotebook",
]
