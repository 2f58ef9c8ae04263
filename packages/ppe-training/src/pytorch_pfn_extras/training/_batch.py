"""The size of a batch, as evaluators need it to weight per-batch means."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
