"""Row and key index bookkeeping shared by every TabularDataset view.

Internally rows are ``None`` (all rows), a ``range`` (what a slice becomes once its length is
known; ranges compose into ranges), a 1-D ``numpy.intp`` array of in-range, non-negative
indices, or an ``int``: the one row of ``dataset[i]`` (cheaper to route than an array). A
user-defined ``get_examples`` sees what PPE passes (:func:`to_external`): ``None``, a ``slice``
for rows asked as a slice, and a ``list`` of ints for anything else (``[i]`` for one row).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from pytorch_pfn_extras.dataset._checks import is_integer

IndexArray: TypeAlias = npt.NDArray[np.intp]
Rows: TypeAlias = "range | IndexArray | int | None"
KeyIndices: TypeAlias = "tuple[int, ...] | None"

_EMPTY: IndexArray = np.empty(0, dtype=np.intp)
_EMPTY.flags.writeable = False


def check_rows(indices: object, length: int, *, copy: bool = False) -> Rows:
    """Validate user-given row indices of a table with ``length`` rows.

    Accepts ``None``, a slice, a boolean mask of ``length`` entries, or a 1-D sequence/array/tensor
    of integers (negative ones count from the end). With ``copy``, the returned array never shares
    memory with ``indices`` (views keep it, so a later change by the caller must not leak in).
    """
    if indices is None:
        return None
    if isinstance(indices, slice):
        return range(length)[indices]
    if isinstance(indices, (numbers.Integral, np.integer)):
        message = (
            f"row indices must be a slice, a sequence of ints or a boolean mask, got the int "
            f"{indices!r}; use dataset[{indices!r}] for one example or [{indices!r}] for a view"
        )
        raise TypeError(message)
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().numpy()
    original = indices
    try:
        array = np.asarray(indices)
    except (TypeError, ValueError) as error:
        message = (
            f"row indices must be a slice, a sequence of ints or a boolean mask, got {indices!r}"
        )
        raise TypeError(message) from error
    if array.ndim == 0:
        message = (
            f"row indices must be a slice, a sequence of ints or a boolean mask, got "
            f"{type(indices).__name__} {indices!r}"
        )
        raise TypeError(message)
    if array.ndim != 1:
        message = f"row indices must be one-dimensional, got an array of shape {array.shape}"
        raise ValueError(message)
    if array.dtype == np.bool_:
        if len(array) != length:
            message = f"boolean mask has {len(array)} entries but the dataset has {length} rows"
            raise ValueError(message)
        return np.flatnonzero(array).astype(np.intp, copy=False)
    if array.size == 0:
        return _EMPTY
    if array.dtype.kind not in "iu":
        message = f"row indices must be integers or booleans, got {array.dtype} values: {indices!r}"
        raise TypeError(message)
    result: IndexArray = array.astype(np.intp, copy=False)
    low, high = int(result.min()), int(result.max())
    if low < -length or high >= length:
        bad = int(result[(result < -length) | (result >= length)][0])
        message = f"row index {bad} is out of range for a dataset of {length} rows"
        raise IndexError(message)
    if low < 0:
        return np.where(result < 0, result + length, result)
    if copy and isinstance(original, np.ndarray) and np.may_share_memory(result, original):
        result = result.copy()
    return result


def check_index(index: object, length: int) -> int:
    """Validate one row index (``dataset[i]``, ``get_example(i)``); negative counts from the end."""
    if not is_integer(index):
        message = f"example index must be an int, got {type(index).__name__} {index!r}"
        raise TypeError(message)
    i = int(index)
    if not -length <= i < length:
        message = f"index {i} is out of range for a dataset of {length} rows"
        raise IndexError(message)
    return i + length if i < 0 else i


def count_rows(rows: Rows, length: int) -> int:
    """Number of rows selected by ``rows`` in a table of ``length`` rows."""
    if rows is None:
        return length
    return 1 if isinstance(rows, int) else len(rows)


def compose_rows(outer: Rows, inner: Rows) -> Rows:
    """Rows of the parent selected by taking ``inner`` of the view given by ``outer``."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    if isinstance(outer, int):  # views never hold one row; for completeness
        outer = np.array([outer], dtype=np.intp)
    if isinstance(inner, int):
        return outer[inner] if isinstance(outer, range) else int(outer[inner])
    if isinstance(outer, range):
        if isinstance(inner, range):
            return outer[range_to_slice(inner)]
        if outer.start == 0 and outer.step == 1:
            return inner
        composed: IndexArray = inner * outer.step + outer.start
        return composed
    if isinstance(inner, range):
        return outer[range_to_slice(inner)]
    return outer[inner]


def range_to_slice(rows: range) -> slice:
    """The slice selecting the same positions as ``rows`` (``range.stop`` may be ``-1``)."""
    if len(rows) == 0:
        return slice(0, 0, 1)
    stop = rows.stop if rows.stop >= 0 else None
    return slice(rows.start, stop, rows.step)


def to_external(rows: Rows, length: int) -> slice | list[int] | None:
    """What ``get_examples`` of a user-defined table of ``length`` rows receives for ``rows``.

    ``None`` stays ``None`` (all rows); a range becomes the equivalent slice (``slice(None)`` for
    every row, in order); an index array becomes a list of ints, and one row ``i`` is ``[i]``.
    """
    if rows is None:
        return None
    if isinstance(rows, int):
        return [rows]
    if isinstance(rows, range):
        if rows == range(length):
            return slice(None)
        return range_to_slice(rows)
    indices: list[int] = rows.tolist()
    return indices


def as_index_array(rows: Rows, length: int) -> IndexArray:
    """``rows`` as an explicit index array."""
    if rows is None:
        return np.arange(length, dtype=np.intp)
    if isinstance(rows, range):
        return np.arange(rows.start, rows.stop, rows.step, dtype=np.intp)
    if isinstance(rows, int):
        return np.array([rows], dtype=np.intp)
    return rows


def check_keys(keys: object, names: tuple[str, ...]) -> tuple[tuple[int, ...], bool]:
    """Resolve a key selection to key indices; the flag is ``True`` for a single (unary) key.

    ``keys`` is a key name or position, or a tuple/list of them, or a boolean mask over the keys.
    """
    if isinstance(keys, str) or is_integer(keys):
        return (_key_index(keys, names),), True
    if isinstance(keys, (np.ndarray, torch.Tensor)):
        keys = keys.tolist()
    if not isinstance(keys, Sequence) or isinstance(keys, (str, bytes)):
        message = (
            f"keys must be a key name, a key position, a tuple/list of them or a boolean mask, "
            f"got {type(keys).__name__} {keys!r}"
        )
        raise TypeError(message)
    items = list(keys)
    if items and all(isinstance(k, (bool, np.bool_)) for k in items):
        if len(items) != len(names):
            message = (
                f"key mask has {len(items)} entries but the dataset has {len(names)} keys {names!r}"
            )
            raise ValueError(message)
        return tuple(i for i, keep in enumerate(items) if keep), False
    indices = tuple(_key_index(k, names) for k in items)
    if len(set(indices)) != len(indices):
        message = f"keys must be unique, got {keys!r} for a dataset with keys {names!r}"
        raise ValueError(message)
    return indices, False


def _key_index(key: Any, names: tuple[str, ...]) -> int:
    if isinstance(key, str):
        try:
            return names.index(key)
        except ValueError:
            message = f"unknown key {key!r}; the dataset has keys {names!r}"
            raise KeyError(message) from None
    if is_integer(key):
        i = int(key)
        if not -len(names) <= i < len(names):
            message = f"key index {i} is out of range for a dataset with keys {names!r}"
            raise IndexError(message)
        return i + len(names) if i < 0 else i
    message = f"a key must be a name (str) or a position (int), got {type(key).__name__} {key!r}"
    raise TypeError(message)


def compose_keys(outer: KeyIndices, inner: KeyIndices) -> KeyIndices:
    """Key indices of the parent selected by taking ``inner`` of the view given by ``outer``."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    return tuple(outer[i] for i in inner)
