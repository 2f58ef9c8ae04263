"""MicroAverage, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.micro_average import MicroAverage
    >>> manager.extend(MicroAverage("main/correct", "main/total", "main/accuracy"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._micro_average import MicroAverage

__all__ = [
    "MicroAverage",
]
