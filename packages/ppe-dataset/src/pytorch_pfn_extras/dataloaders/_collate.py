"""Collate functions: dict batches and column-wise collation of TabularDataset batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from pytorch_pfn_extras.dataset.tabular._tabular_dataset import _Batch, arrange


class CollateAsDict:
    """Creates a collate function that converts inputs to a dict of tensors.

    An instance is meant to be passed to a DataLoader as ``collate_fn``: it applies
    ``collate_fn`` to the batch and names the resulting values.

    Args:
        names: Names for each column of data returned by the dataset.
        collate_fn: Collate function applied first; it must return a sequence with one value
            per name.

    Example:
        >>> loader = DataLoader(dataset, batch_size=4, collate_fn=CollateAsDict(["x", "t"]))
        >>> batch = next(iter(loader))  # {"x": tensor(...), "t": tensor(...)}
    """

    def __init__(
        self, names: Sequence[str], collate_fn: Callable[..., Any] = default_collate
    ) -> None:
        if isinstance(names, str) or not all(isinstance(name, str) for name in names):
            message = f"names must be a sequence of str, got {names!r}"
            raise TypeError(message)
        self._names = tuple(names)
        self._collate_fn = collate_fn

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Collate with ``collate_fn`` (given every argument) and name the values."""
        values = self._collate_fn(*args, **kwargs)
        if len(values) != len(self._names):
            message = (
                f"CollateAsDict has {len(self._names)} names {self._names!r} but the collated "
                f"batch has {len(values)} values"
            )
            raise ValueError(message)
        return dict(zip(self._names, values))


class TabularCollate:
    """``default_collate``, column by column for batches of a TabularDataset.

    Gives the same result as ``default_collate`` (a list of tensors in tuple mode, a dict in dict
    mode, a tensor in unary mode) but turns each fetched array column into a tensor in one call
    instead of stacking one example at a time. Other batches go to ``default_collate``.
    """

    def __call__(self, batch: Any) -> Any:
        if not isinstance(batch, _Batch) or len(batch) == 0:
            return default_collate(batch)
        # default_collate sees a column as a tuple in tuple mode (zip), a list otherwise
        sequence: Callable[[Any], Any] = tuple if batch.mode is tuple else list
        columns = [_collate_column(column, sequence) for column in batch.columns]
        if batch.mode is tuple:
            return columns  # default_collate makes a list of a batch of tuples
        return arrange(columns, batch.keys, batch.mode)


def _collate_column(column: Any, sequence: Callable[[Any], Any]) -> Any:
    if isinstance(column, np.ndarray) and column.dtype.kind in "biufc":
        return torch.from_numpy(np.array(column, copy=True))
    if isinstance(column, torch.Tensor):
        return column.clone(memory_format=torch.contiguous_format)
    return default_collate(sequence(column))
