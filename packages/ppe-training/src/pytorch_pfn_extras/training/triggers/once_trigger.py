"""OnceTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.once_trigger import OnceTrigger
    >>> manager.extend(report_hyperparameters, trigger=OnceTrigger())
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._once_trigger import OnceTrigger

__all__ = [
    "OnceTrigger",
]
