"""Slices, mode changes and converter overrides: one flat, lazy view over a parent.

A view of a view is folded into a single view at construction (row and key indices are
composed right away), so a chain of slices costs one level of indirection and one index array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeAlias

from pytorch_pfn_extras.dataset.tabular._indexing import (
    KeyIndices,
    Rows,
    compose_keys,
    compose_rows,
    count_rows,
)
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import (
    KEEP_OR_TUPLE,
    Mode,
    TabularDataset,
)

INHERIT: Final = "inherit"
ModeSpec: TypeAlias = "Mode | str"


def _merge_mode(parent: ModeSpec, child: ModeSpec) -> ModeSpec:
    if child == INHERIT:
        return parent
    if child == KEEP_OR_TUPLE and parent not in (INHERIT, KEEP_OR_TUPLE):
        return parent or tuple
    return child


class View(TabularDataset):
    """Rows and keys of ``dataset``, possibly with another mode or converter."""

    _dataset: TabularDataset
    _rows: Rows
    _key_indices: KeyIndices
    _mode_spec: ModeSpec
    _converter: Callable[..., Any] | None

    def __init__(
        self,
        dataset: TabularDataset,
        rows: Rows = None,
        key_indices: KeyIndices = None,
        mode: ModeSpec = INHERIT,
        converter: Callable[..., Any] | None = None,
    ) -> None:
        if isinstance(dataset, View):
            rows = compose_rows(dataset._rows, rows)
            key_indices = compose_keys(dataset._key_indices, key_indices)
            mode = _merge_mode(dataset._mode_spec, mode)
            if converter is None:
                converter = dataset._converter
            dataset = dataset._dataset
        # A view of every row or key keeps its range / key tuple rather than ``None``: a
        # user-defined source is asked ``slice(None)`` and the key tuple, as in PPE.
        parent_length = len(dataset)
        self._dataset = dataset
        self._rows = rows
        self._key_indices = key_indices
        self._mode_spec = mode
        self._converter = converter
        self._length = count_rows(rows, parent_length)
        parent_keys = dataset.keys
        self._keys = (
            parent_keys if key_indices is None else tuple(parent_keys[i] for i in key_indices)
        )

    def __len__(self) -> int:
        return self._length

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Mode:
        spec = self._mode_spec
        if spec == INHERIT:
            return self._dataset.mode
        if spec == KEEP_OR_TUPLE:
            return self._dataset.mode or tuple
        return spec  # type: ignore[return-value]

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        rows = compose_rows(self._rows, rows)
        key_indices = compose_keys(self._key_indices, key_indices)
        return self._dataset._get_rows(rows, key_indices)

    def convert(self, data: Any) -> Any:
        converter = self._converter
        if converter is not None:
            if isinstance(data, tuple):
                return converter(*data)
            if isinstance(data, dict):
                return converter(**data)
            return converter(data)
        return self._dataset.convert(data)
