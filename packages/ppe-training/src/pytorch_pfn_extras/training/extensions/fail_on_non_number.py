"""FailOnNonNumber, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.fail_on_non_number import FailOnNonNumber
    >>> manager.extend(FailOnNonNumber())
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._fail_on_non_number import FailOnNonNumber

__all__ = [
    "FailOnNonNumber",
]
