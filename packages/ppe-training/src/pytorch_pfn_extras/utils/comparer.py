"""Compare trainers and evaluators step by step: outputs, parameters and intermediate values."""

from __future__ import annotations

from pytorch_pfn_extras.utils._comparer import (
    Comparer,
    ModelComparer,
    OutputsComparer,
    get_default_comparer,
    intermediate_value,
)

__all__ = [
    "Comparer",
    "ModelComparer",
    "OutputsComparer",
    "get_default_comparer",
    "intermediate_value",
]
