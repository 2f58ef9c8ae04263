"""A terminal progress bar redrawn in place, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.util import ProgressBar
"""

from pytorch_pfn_extras.training._engine._progress import ProgressBar

__all__ = [
    "ProgressBar",
]
