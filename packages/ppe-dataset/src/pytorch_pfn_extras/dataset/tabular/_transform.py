"""Lazy per-example and per-batch transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytorch_pfn_extras.dataset.tabular._indexing import KeyIndices, Rows, count_rows
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import Mode, TabularDataset, _short


class Transform(TabularDataset):
    """``dataset.transform(keys, f)`` (``batch=False``) and ``transform_batch`` (``batch=True``).

    The mode follows what the function returns (a tuple, a dict, or a value for one key); it is
    recorded on the first call, and asking for it before any fetch transforms one example.
    """

    def __init__(
        self,
        dataset: TabularDataset,
        keys: str | tuple[str, ...],
        function: Callable[..., Any],
        *,
        batch: bool,
    ) -> None:
        name = "transform_batch" if batch else "transform"
        if isinstance(keys, str):
            self._unary = True
            keys = (keys,)
        elif isinstance(keys, tuple) and all(isinstance(key, str) for key in keys):
            self._unary = False
            if len(set(keys)) != len(keys):
                message = f"{name} keys must be unique, got {keys!r}"
                raise ValueError(message)
        else:
            message = f"{name} keys must be a str or a tuple of str, got {keys!r}"
            raise TypeError(message)
        if not callable(function):
            message = f"{name} needs a callable, got {type(function).__name__} {function!r}"
            raise TypeError(message)
        self._dataset = dataset
        self._keys: tuple[str, ...] = keys
        self._function = function
        self._batch = batch
        self._name = name
        self._mode: Mode | str = "unknown"
        if self._unary:
            self._mode = None

    def __len__(self) -> int:
        return len(self._dataset)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Mode:
        if self._mode == "unknown":
            if len(self._dataset) == 0:
                return tuple
            self._get_rows(range(1), None)
        return self._mode  # type: ignore[return-value]

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        parent = self._dataset
        columns = parent._get_rows(rows, None)
        n_rows = count_rows(rows, len(parent))
        wanted = range(len(self._keys)) if key_indices is None else key_indices
        parent_mode = parent.mode
        if self._batch:
            output = _call(self._function, columns, parent.keys, parent_mode)
            return self._pick_columns(output, wanted, n_rows)
        if parent_mode is dict:
            names = parent.keys
            outputs = [self._function(**dict(zip(names, row))) for row in zip(*columns)]
        else:
            outputs = [self._function(*row) for row in zip(*columns)]
        return self._pick_values(outputs, wanted)

    # ------------------------------------------------------------------ output checks

    def _record_mode(self, mode: Mode, output: Any) -> None:
        if self._mode == "unknown":
            self._mode = mode
        elif self._mode is not mode:
            previous = "a tuple" if self._mode is tuple else "a dict"
            message = (
                f"{self._name} must always return the same type: it returned {previous} before "
                f"but now {type(output).__name__} {_short(output)}"
            )
            raise ValueError(message)

    def _check_output(self, output: Any) -> None:
        keys = self._keys
        if isinstance(output, tuple):
            if len(output) != len(keys):
                message = (
                    f"{self._name} must return {len(keys)} values for keys {keys!r}, got a tuple "
                    f"of {len(output)}: {_short(output)}"
                )
                raise ValueError(message)
            self._record_mode(tuple, output)
        elif isinstance(output, dict):
            if output.keys() != set(keys):
                message = (
                    f"{self._name} must return a dict with keys {keys!r}, got keys "
                    f"{tuple(output)!r}"
                )
                raise ValueError(message)
            self._record_mode(dict, output)
        else:
            message = (
                f"{self._name} must return a tuple or a dict for keys {keys!r}, got "
                f"{type(output).__name__} {_short(output)}"
            )
            raise TypeError(message)

    def _pick_values(self, outputs: list[Any], wanted: range | tuple[int, ...]) -> tuple[Any, ...]:
        if self._unary:
            return (outputs,)
        for output in outputs:
            self._check_output(output)
        if self._mode is dict:
            names = [self._keys[k] for k in wanted]
            return tuple([output[name] for output in outputs] for name in names)
        return tuple([output[k] for output in outputs] for k in wanted)

    def _pick_columns(
        self, output: Any, wanted: range | tuple[int, ...], n_rows: int
    ) -> tuple[Any, ...]:
        if self._unary:
            columns: tuple[Any, ...] = (output,)
        else:
            self._check_output(output)
            if isinstance(output, dict):
                columns = tuple(output[key] for key in self._keys)
            else:
                columns = output
        for key, column in zip(self._keys, columns):
            try:
                length = len(column)
            except TypeError:
                message = (
                    f"{self._name} must return columns with one entry per row, got "
                    f"{type(column).__name__} {_short(column)} for key {key!r}"
                )
                raise TypeError(message) from None
            if length != n_rows:
                message = (
                    f"{self._name} must not change the number of rows: key {key!r} has {length} "
                    f"rows, expected {n_rows}"
                )
                raise ValueError(message)
        return tuple(columns[k] for k in wanted)


def _call(
    function: Callable[..., Any], columns: tuple[Any, ...], keys: tuple[str, ...], mode: Mode
) -> Any:
    if mode is dict:
        return function(**dict(zip(keys, columns)))
    return function(*columns)
