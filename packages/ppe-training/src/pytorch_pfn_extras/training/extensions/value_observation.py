"""observe_value and observe_lr, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.value_observation import observe_lr
    >>> manager.extend(observe_lr(optimizer))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._value_observation import (
    observe_lr,
    observe_value,
)

__all__ = [
    "observe_lr",
    "observe_value",
]
