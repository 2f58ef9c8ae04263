"""The evaluation extensions, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.evaluator import Evaluator
    >>> manager.extend(Evaluator(val_loader, model))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._evaluator import (
    DistributedEvaluator,
    Evaluator,
    IgniteEvaluator,
    IterationStatus,
)

__all__ = [
    "DistributedEvaluator",
    "Evaluator",
    "IgniteEvaluator",
    "IterationStatus",
]
