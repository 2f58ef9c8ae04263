"""``from_data``: tables from arrays, tensors, lists and per-index callables."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pytorch_pfn_extras.dataset._checks import is_integer
from pytorch_pfn_extras.dataset.tabular import _columns
from pytorch_pfn_extras.dataset.tabular._indexing import KeyIndices, Rows, as_index_array
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import Mode, TabularDataset


class Columns(TabularDataset):
    """In-memory columns (arrays, tensors or lists) of equal length."""

    def __init__(self, keys: tuple[str, ...], columns: list[Any], mode: Mode, length: int) -> None:
        self._keys = keys
        self._columns = columns
        self._mode = mode
        self._length = length

    def __len__(self) -> int:
        return self._length

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Mode:
        return self._mode

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        columns = self._columns
        if key_indices is not None:
            columns = [columns[k] for k in key_indices]
        return tuple(_columns.take(column, rows) for column in columns)


class _Index(TabularDataset):
    """A unary table whose value at row ``i`` is ``i`` (a Python int)."""

    def __init__(self, size: int) -> None:
        self._size = size

    def __len__(self) -> int:
        return self._size

    @property
    def keys(self) -> tuple[str, ...]:
        return ("index",)

    @property
    def mode(self) -> Mode:
        return None

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        if rows is None:
            return (list(range(self._size)),)
        if isinstance(rows, int):
            return ([rows],)
        if isinstance(rows, range):
            return (list(rows),)
        return (as_index_array(rows, self._size).tolist(),)


def from_data(data: Any, *, size: int | None = None) -> TabularDataset:
    """Create a TabularDataset from lists/arrays/callables.

    Arrays (:class:`numpy.ndarray`, :class:`torch.Tensor`) and lists are columns; a callable
    is called lazily with each requested row index ``i`` (an int) and returns that row's value
    (for one key) or a tuple/dict of values (for a tuple of keys).

    Args:
        data: One of

            - a list/array: a unary dataset with an automatically named key;
            - ``(key, list/array/callable)``: a unary dataset named ``key``;
            - ``((key, ...), callable)``: the callable's outputs, keyed;
            - a tuple whose items are any of the three above: a tuple dataset;
            - a dict ``{key: list/array/callable, (key, ...): callable}``: a dict dataset.
        size: The number of rows. Needed when ``data`` has only callables; otherwise it must
            match the length of the lists/arrays.

    Returns:
        A :class:`~pytorch_pfn_extras.dataset.TabularDataset` that reads its columns lazily.

    Raises:
        ValueError: If lengths disagree, ``size`` is missing for callables only, keys repeat, or
            a callable comes without a key.
        TypeError: If an entry is not a list, array or callable.

    Example:
        >>> from pytorch_pfn_extras.dataset import tabular
        >>> tabular.from_data([0, 1, 2])[0]
        0
        >>> tabular.from_data((('a', [0, 1, 2]), ('b', [3, 4, 5])))[0]
        (0, 3)
        >>> sorted(tabular.from_data({'a': [0, 1, 2], 'b': [3, 4, 5]})[0].items())
        [('a', 0), ('b', 3)]
        >>> tabular.from_data(('a', lambda i: i * i), size=10)[5]
        25
    """
    mode: Mode = None
    if _is_entry(data):
        entries = [_entry(data)]
    elif _is_column(data):
        entries = [(f"_{id(data)}", data)]
    elif callable(data):
        raise _keyless_callable(data)
    elif isinstance(data, tuple):
        entries = []
        for position, item in enumerate(data):
            if _is_entry(item):
                entries.append(_entry(item))
            elif callable(item) and not _is_column(item):
                raise _keyless_callable(item, position)
            else:
                entries.append((f"_{id(item)}_{position}", item))
        mode = tuple
    elif isinstance(data, dict):
        entries = list(data.items())
        mode = dict
    else:
        message = (
            f"from_data takes a list/array, a (key, data) pair, a tuple or a dict, got "
            f"{type(data).__name__} {data!r}"
        )
        raise TypeError(message)
    if not entries:
        message = "from_data needs at least one column"
        raise ValueError(message)
    length = _common_length(entries, size)
    _check_unique_keys(entries)
    parts: list[TabularDataset] = []
    pending_keys: list[str] = []
    pending_columns: list[Any] = []
    for keys, value in entries:
        if callable(value) and not _is_column(value):
            if pending_keys:
                parts.append(Columns(tuple(pending_keys), pending_columns, tuple, length))
                pending_keys, pending_columns = [], []
            parts.append(_Index(length).transform(keys, value))
        else:
            if not isinstance(keys, str):
                message = f"a list/array column takes one key (a str), got {keys!r}"
                raise TypeError(message)
            pending_keys.append(keys)
            pending_columns.append(value)
    if pending_keys:
        parts.append(Columns(tuple(pending_keys), pending_columns, tuple, length))
    if len(parts) == 1 and isinstance(parts[0], Columns):
        only = parts[0]
        return Columns(only.keys, only._columns, mode, length)
    if mode is None:
        return parts[0]
    joined = parts[0] if len(parts) == 1 else parts[0].join(*parts[1:])
    return joined.asdict() if mode is dict else joined.astuple()


def _keyless_callable(function: Any, position: int | None = None) -> ValueError:
    where = "" if position is None else f" at position {position}"
    message = (
        f"from_data needs a key for the callable {function!r}{where}: pass (key, callable) or "
        f"((key, ...), callable)"
    )
    return ValueError(message)


def _is_column(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor, list))


def _is_entry(value: Any) -> bool:
    if not (isinstance(value, tuple) and len(value) == 2):
        return False
    keys, data = value
    if isinstance(keys, str):
        return True
    return (
        isinstance(keys, tuple)
        and len(keys) > 0
        and all(isinstance(key, str) for key in keys)
        and callable(data)
        and not _is_column(data)
    )


def _entry(value: tuple[Any, Any]) -> tuple[str | tuple[str, ...], Any]:
    keys, data = value
    return keys, data


def _common_length(entries: list[tuple[Any, Any]], size: int | None) -> int:
    if size is not None and (not is_integer(size) or int(size) < 0):
        message = f"size must be a non-negative int, got {size!r}"
        raise ValueError(message)
    length = None if size is None else int(size)
    source = "size"
    for keys, value in entries:
        if _is_column(value):
            if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0:
                message = f"column {keys!r} must have one entry per row, got a 0-d array"
                raise ValueError(message)
            if length is None:
                length, source = len(value), f"column {keys!r}"
            elif len(value) != length:
                message = (
                    f"column {keys!r} has {len(value)} rows but {source} gives {length}; all "
                    f"columns must have the same length"
                )
                raise ValueError(message)
        elif not callable(value):
            message = (
                f"column {keys!r} must be a list, a numpy.ndarray, a torch.Tensor or a callable, "
                f"got {type(value).__name__}"
            )
            raise TypeError(message)
    if length is None:
        message = "size must be given when data has only callables (their length is unknown)"
        raise ValueError(message)
    return length


def _check_unique_keys(entries: list[tuple[Any, Any]]) -> None:
    seen: set[str] = set()
    for keys, _ in entries:
        for key in keys if isinstance(keys, tuple) else (keys,):
            if not isinstance(key, str):
                message = f"keys must be str, got {type(key).__name__} {key!r}"
                raise TypeError(message)
            if key in seen:
                message = f"key {key!r} appears more than once; keys must be unique"
                raise ValueError(message)
            seen.add(key)
