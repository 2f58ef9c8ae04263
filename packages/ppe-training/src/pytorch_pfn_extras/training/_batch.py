"""Batch sizes and weighted observations: evaluators average per-batch means by sample."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch


def batch_size_of(batch: object) -> int | None:
    """Return the batch size: the first dimension of the first tensor found in ``batch``.

    ``batch`` may be a tensor or NumPy array, or a mapping, list or tuple (named tuples
    included) of them, nested; values are searched in order, depth first. 0-d tensors and
    arrays carry no batch dimension and are skipped. Only the shape is read, so this never
    synchronizes with a device.

    Args:
        batch: A batch, as a data loader yields it.

    Returns:
        The size of the first dimension, or ``None`` when ``batch`` holds no tensor or array
        of at least one dimension.

    Example:
        >>> batch_size_of({"x": torch.zeros(8, 3), "y": torch.zeros(8)})
        8
        >>> batch_size_of([torch.tensor(1.0), ("a", np.zeros((5, 2)))])
        5
        >>> batch_size_of("text") is None
        True
    """
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.shape[0]) if batch.ndim > 0 else None
    if isinstance(batch, Mapping):
        items: Iterable[object] = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in items:
        size = batch_size_of(item)
        if size is not None:
            return size
    return None


def _is_scalar(value: Any) -> bool:
    """Whether DictSummary averages ``value`` (so that it can take a weight)."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0
    if isinstance(value, np.ndarray):
        return value.ndim == 0
    return isinstance(value, numbers.Real) or (callable(value) and not isinstance(value, type))


def weighted(observation: Mapping[str, Any], weight: int | None) -> Mapping[str, Any]:
    """Return the observation with each scalar weighted by ``weight`` (the batch size).

    ``(value, weight)`` pairs reported by the user keep their weight; other values pass
    unchanged (DictSummary skips what it cannot average).

    Args:
        observation: The values reported during one step.
        weight: The batch size; ``None`` or 1 leaves the observation as it is.

    Returns:
        What to pass to ``DictSummary.add``.
    """
    if weight is None or weight == 1:
        return observation
    return {
        key: (value, weight) if _is_scalar(value) else value for key, value in observation.items()
    }
