"""ProgressBar, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.progress_bar import ProgressBar
    >>> manager.extend(ProgressBar(update_interval=10))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._progress_bar import ProgressBar

__all__ = [
    "ProgressBar",
]
