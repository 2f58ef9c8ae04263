"""Row-wise concatenation of tables with the same keys."""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import numpy as np

from pytorch_pfn_extras.dataset.tabular._indexing import IndexArray, KeyIndices, Rows
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import Mode, TabularDataset


class Concat(TabularDataset):
    """The rows of each dataset, one after the other; mode of the first non-empty one.

    A read asks each part holding requested rows once (a slice of the concatenation asks each
    part for the equivalent slice). Rows from one part come back as that part returns them;
    rows from several parts come back as lists, one per column (PPE's type).
    """

    _datasets: tuple[TabularDataset, ...]

    def __init__(self, *datasets: TabularDataset) -> None:
        if not datasets:
            message = "concat needs at least one dataset"
            raise ValueError(message)
        for position, dataset in enumerate(datasets):
            if not isinstance(dataset, TabularDataset):
                message = (
                    f"concat takes TabularDatasets, got {type(dataset).__name__} at position "
                    f"{position}"
                )
                raise TypeError(message)
            if dataset.keys != datasets[0].keys:
                message = (
                    f"cannot concat datasets with different keys: dataset 0 has keys "
                    f"{datasets[0].keys!r} but dataset {position} has {dataset.keys!r}"
                )
                raise ValueError(message)
        flat: list[TabularDataset] = []
        for dataset in datasets:
            flat.extend(dataset._datasets if isinstance(dataset, Concat) else [dataset])
        self._datasets = tuple(flat)
        self._lengths = [len(dataset) for dataset in flat]
        self._offsets = np.cumsum([0, *self._lengths], dtype=np.intp)
        self._ends = self._offsets[1:].tolist()  # for locating one row with bisect

    def __len__(self) -> int:
        return int(self._offsets[-1])

    @property
    def keys(self) -> tuple[str, ...]:
        return self._datasets[0].keys

    @property
    def mode(self) -> Mode:
        # The first non-empty dataset's: an empty transformed table cannot know the mode its
        # function would produce (no example to call it on).
        for dataset in self._datasets:
            if len(dataset) > 0:
                return dataset.mode
        return self._datasets[0].mode

    def convert(self, data: Any) -> Any:
        return self._datasets[0].convert(data)

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        order: IndexArray | None = None
        if rows is None:
            pieces: list[tuple[int, Rows]] = [
                (i, None) for i, length in enumerate(self._lengths) if length > 0
            ]
        elif isinstance(rows, int):
            part = bisect.bisect_right(self._ends, rows)
            pieces = [(part, rows - int(self._offsets[part]))]
        elif isinstance(rows, range):
            pieces = list(self._split_range(rows))
        else:
            pieces, order = self._split_array(rows)
        n_columns = len(self.keys) if key_indices is None else len(key_indices)
        if not pieces:  # nothing requested: no part is asked
            return tuple([] for _ in range(n_columns))
        parts = [self._datasets[i]._get_rows(local, key_indices) for i, local in pieces]
        if len(parts) == 1:  # one part holds every requested row (and then in order)
            return parts[0]
        # Rows of several parts: each column is a list, whatever the parts return (as in PPE).
        columns = tuple(
            list(itertools.chain.from_iterable(part[c] for part in parts)) for c in range(n_columns)
        )
        if order is None:
            return columns
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order), dtype=np.intp)
        return tuple([column[i] for i in inverse.tolist()] for column in columns)

    def _split_range(self, rows: range) -> list[tuple[int, range]]:
        if rows.step < 0:
            forward = self._split_range(rows[::-1])
            return [(i, local[::-1]) for i, local in reversed(forward)]
        pieces: list[tuple[int, range]] = []
        start, step, count = rows.start, rows.step, len(rows)
        for i, length in enumerate(self._lengths):
            offset = int(self._offsets[i])
            first = max(0, -((start - offset) // step))
            last = min(count, -((start - offset - length) // step))
            if first < last:
                local = range(start + first * step - offset, start + last * step - offset, step)
                pieces.append((i, range(length)[local.start : local.stop : step]))
        return pieces

    def _split_array(self, rows: IndexArray) -> tuple[list[tuple[int, Rows]], IndexArray | None]:
        owner = np.searchsorted(self._offsets[1:], rows, side="right")
        order: IndexArray | None = None
        if len(owner) > 1 and bool(np.any(owner[1:] < owner[:-1])):
            order = np.argsort(owner, kind="stable")
            rows = rows[order]
            owner = owner[order]
        bounds = np.searchsorted(owner, np.arange(len(self._datasets) + 1), side="left")
        pieces: list[tuple[int, Rows]] = []
        for i in range(len(self._datasets)):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if lo < hi:
                pieces.append((i, rows[lo:hi] - self._offsets[i]))
        return pieces, order
