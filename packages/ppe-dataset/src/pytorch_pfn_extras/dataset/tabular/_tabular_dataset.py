"""The abstract :class:`TabularDataset` and the operations every table gets."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias, overload

import numpy as np
import torch
from torch.utils.data import Dataset

from pytorch_pfn_extras.dataset.tabular._indexing import (
    KeyIndices,
    Rows,
    check_index,
    check_keys,
    check_rows,
    count_rows,
    to_external,
)

Mode: TypeAlias = "type[tuple[Any, ...]] | type[dict[str, Any]] | None"

_ITER_CHUNK = 1024


class TabularDataset(Dataset[Any], abc.ABC):
    """An abstract class that represents tabular dataset.

    In a tabular dataset all examples have the same elements, one per column (key). An example
    is represented as a tuple ``(a[i], b[i], c[i])`` or a dict ``{'a': a[i], 'b': b[i], 'c':
    c[i]}``; :attr:`mode` says which. A table with a single column may also represent an example
    by the bare value ``a[i]``; its :attr:`mode` is ``None`` (unary).

    A subclass implements :meth:`__len__`, :attr:`keys`, :attr:`mode` and :meth:`get_examples`;
    everything else (slicing, concatenation, joins, transforms, iteration, DataLoader support)
    is built on them. Views are lazy: no data is read until :meth:`fetch`, :meth:`get_examples`
    or indexing, and then the source receives the composed row and key indices in one call.

    Example:
        >>> import numpy as np
        >>> from pytorch_pfn_extras import dataset
        >>> class MyDataset(dataset.TabularDataset):
        ...     def __len__(self):
        ...         return 4
        ...     @property
        ...     def keys(self):
        ...         return ('a', 'b', 'c')
        ...     @property
        ...     def mode(self):
        ...         return tuple
        ...     def get_examples(self, indices, key_indices):
        ...         data = np.arange(12).reshape((4, 3))
        ...         if indices is not None:
        ...             data = data[indices]
        ...         if key_indices is not None:
        ...             data = data[:, list(key_indices)]
        ...         return tuple(data.transpose().tolist())
        >>> ds = MyDataset()
        >>> ds.astuple()[0]
        (0, 1, 2)
        >>> view = ds.slice[[3, 2], ('c', 0)]
        >>> view.keys
        ('c', 'a')
        >>> view.astuple()[1]
        (8, 6)
    """

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of rows."""

    @property
    @abc.abstractmethod
    def keys(self) -> tuple[str, ...]:
        """Names of columns.

        A tuple of strings specifying the names of the columns.
        """

    @property
    @abc.abstractmethod
    def mode(self) -> Mode:
        """Mode of representation.

        This indicates the type of value returned by :meth:`fetch` and :meth:`__getitem__`:
        :class:`tuple`, :class:`dict`, or ``None`` for a unary (single column) dataset.
        """

    @abc.abstractmethod
    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        """Return a part of data.

        Args:
            indices: Indices of the requested rows: a slice, a 1-D integer
                :class:`numpy.ndarray` (or a list of ints), or ``None`` for all rows.
                Indices given by the framework are always in range and non-negative.
            key_indices: Positions of the requested columns, or ``None`` for all columns.

        Returns:
            A tuple with one column per requested key, in the requested order. A column is a
            list, a :class:`numpy.ndarray` or a :class:`torch.Tensor` holding the requested
            rows in the requested order.
        """

    # ------------------------------------------------------------------ internal fetch path

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        """Fetch validated rows/keys; views override this to compose indices without checks."""
        columns = self.get_examples(to_external(rows), key_indices)
        expected = len(self.keys) if key_indices is None else len(key_indices)
        if not isinstance(columns, (tuple, list)) or len(columns) != expected:
            message = (
                f"{type(self).__name__}.get_examples must return a tuple of {expected} columns, "
                f"got {type(columns).__name__} {_short(columns)}"
            )
            raise ValueError(message)
        n_rows = count_rows(rows, len(self))
        for position, column in enumerate(columns):
            if len(column) != n_rows:
                index = position if key_indices is None else key_indices[position]
                message = (
                    f"{type(self).__name__}.get_examples returned {len(column)} rows for column "
                    f"{self.keys[index]!r}, expected {n_rows}"
                )
                raise ValueError(message)
        return tuple(columns)

    def _check_request(self, indices: Any, key_indices: Any) -> tuple[Rows, KeyIndices]:
        rows = check_rows(indices, len(self))
        if key_indices is None:
            return rows, None
        return rows, check_keys(tuple(key_indices), self.keys)[0]

    # ------------------------------------------------------------------ views

    @property
    def slice(self) -> _SliceHelper:
        """Get a slice of dataset.

        ``dataset.slice[rows]`` and ``dataset.slice[rows, keys]`` return a lazy view.

        ``rows`` is a slice, a sequence/array of ints (negative ones count from the end) or a
        boolean mask with one entry per row. ``keys`` is a key name or position (the view is
        unary: its mode is ``None``), or a tuple/list of names and positions, or a boolean mask
        over the keys (the view keeps the mode, or becomes a tuple dataset if it was unary).

        Example:
            >>> view = ds.slice[1:3, ('b', 'a')]
            >>> column = ds.slice[[0, 2], 'a']
        """
        return _SliceHelper(self)

    def astuple(self) -> TabularDataset:
        """Return a view with tuple mode."""
        from pytorch_pfn_extras.dataset.tabular._view import View

        return View(self, mode=tuple)

    def asdict(self) -> TabularDataset:
        """Return a view with dict mode."""
        from pytorch_pfn_extras.dataset.tabular._view import View

        return View(self, mode=dict)

    def with_converter(self, converter: Callable[..., Any]) -> TabularDataset:
        """Override the behaviour of :meth:`convert`.

        Args:
            converter: Called with the fetched data (positional columns in tuple mode, keyword
                columns in dict mode, the column in unary mode) instead of the default conversion.

        Returns:
            A view of this dataset whose :meth:`convert` uses ``converter``.
        """
        if not callable(converter):
            message = f"converter must be callable, got {type(converter).__name__} {converter!r}"
            raise TypeError(message)
        from pytorch_pfn_extras.dataset.tabular._view import View

        return View(self, converter=converter)

    def concat(self, *datasets: TabularDataset) -> TabularDataset:
        """Stack datasets along rows.

        Args:
            datasets: Datasets with the same keys (in the same order) as this one.

        Returns:
            A dataset with the rows of this dataset followed by the rows of each argument. Its
            mode and converter are this dataset's.

        Raises:
            ValueError: If the keys differ.
        """
        from pytorch_pfn_extras.dataset.tabular._concat import Concat

        return Concat(self, *datasets)

    def join(self, *datasets: TabularDataset) -> TabularDataset:
        """Stack datasets along columns.

        Args:
            datasets: Datasets with as many rows as this one and keys not used by any other.

        Returns:
            A dataset with the keys of this dataset followed by the keys of each argument. Its
            mode is the first non-unary mode among them (``tuple`` if all are unary).

        Raises:
            ValueError: If the lengths differ or a key appears twice.
        """
        from pytorch_pfn_extras.dataset.tabular._join import Join

        return Join(self, *datasets)

    def transform(
        self, keys: str | tuple[str, ...], transform: Callable[..., Any]
    ) -> TabularDataset:
        """Apply a transform to each example.

        The transform is called lazily, once per fetched row, with the example's values as
        positional arguments (tuple and unary mode) or keyword arguments (dict mode).

        Args:
            keys: The output keys: a tuple of names, or one name for a unary output.
            transform: Returns, for tuple ``keys``, a tuple with one value per key (tuple mode) or
                a dict with exactly ``keys`` (dict mode); for a single key, the value itself.

        Returns:
            A dataset with keys ``keys`` and the same length.
        """
        from pytorch_pfn_extras.dataset.tabular._transform import Transform

        return Transform(self, keys, transform, batch=False)

    def transform_batch(
        self, keys: str | tuple[str, ...], transform_batch: Callable[..., Any]
    ) -> TabularDataset:
        """Apply a transform to examples.

        Like :meth:`transform`, but called once per fetch with whole columns (lists, arrays or
        tensors) and returning whole columns, so array code runs vectorised.

        Args:
            keys: The output keys: a tuple of names, or one name for a unary output.
            transform_batch: Returns a tuple of columns, a dict of columns keyed by ``keys``, or
                (for a single key) the column. Every column must keep the number of rows.

        Returns:
            A dataset with keys ``keys`` and the same length.
        """
        from pytorch_pfn_extras.dataset.tabular._transform import Transform

        return Transform(self, keys, transform_batch, batch=True)

    # ------------------------------------------------------------------ data access

    def fetch(self) -> Any:
        """Fetch data.

        Fetches all the data of the dataset/view as columns (column-major): a tuple of columns in
        tuple mode, a dict of columns in dict mode, the column in unary mode. Array-backed
        columns come back as arrays (possibly sharing memory with the source).
        """
        columns = self._get_rows(None, None)
        return _format_columns(columns, self.keys, self.mode)

    def convert(self, data: Any) -> Any:
        """Convert fetched data.

        Takes data returned by :meth:`fetch` and prepares it for a model. By default each column
        becomes a :class:`numpy.ndarray` (tensors and arrays are kept as they are). Override it
        with :meth:`with_converter`; a concatenated or joined dataset uses the converter of its
        first dataset.

        Args:
            data: A tuple or dict of columns, or a column, as returned by :meth:`fetch`.

        Returns:
            The converted data, with the same structure.
        """
        if isinstance(data, tuple):
            return tuple(_as_array(column) for column in data)
        if isinstance(data, dict):
            return {key: _as_array(column) for key, column in data.items()}
        return _as_array(data)

    def get_example(self, i: int) -> Any:
        """Return the ``i``-th example (a tuple, a dict or a value, following :attr:`mode`)."""
        i = check_index(i, len(self))
        columns = self._get_rows(range(i, i + 1), None)
        return _format_row([column[0] for column in columns], self.keys, self.mode)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(
        self, index: builtins.slice | Sequence[int] | np.ndarray[Any, Any]
    ) -> list[Any]: ...

    def __getitem__(self, index: Any) -> Any:
        """One example for an int; a list of examples for a slice, sequence or mask."""
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return self.get_example(int(index))
        rows = check_rows(index, len(self))
        return _Batch(self._get_rows(rows, None), self.keys, self.mode)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The examples at ``indices``, fetched in one call (used by ``torch.utils.data.DataLoader``)."""
        rows = check_rows(indices, len(self))
        return _Batch(self._get_rows(rows, None), self.keys, self.mode)

    def __iter__(self) -> Iterator[Any]:
        """Iterate over examples; rows are fetched in chunks, not one call per row."""
        length = len(self)
        for start in range(0, length, _ITER_CHUNK):
            columns = self._get_rows(range(start, min(start + _ITER_CHUNK, length)), None)
            yield from _Batch(columns, self.keys, self.mode)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rows={len(self)} keys={self.keys!r}>"


class _SliceHelper:
    """``dataset.slice[rows, keys]``."""

    def __init__(self, dataset: TabularDataset) -> None:
        self._dataset = dataset

    def __getitem__(self, args: Any) -> TabularDataset:
        from pytorch_pfn_extras.dataset.tabular._view import KEEP_OR_TUPLE, View

        if isinstance(args, tuple):
            if len(args) != 2:
                message = f"slice takes [rows] or [rows, keys], got {len(args)} indices {args!r}"
                raise IndexError(message)
            rows_arg, keys_arg = args
        else:
            rows_arg, keys_arg = args, None
        dataset = self._dataset
        rows = check_rows(rows_arg, len(dataset), copy=True)
        if keys_arg is None:
            return View(dataset, rows)
        key_indices, unary = check_keys(keys_arg, dataset.keys)
        return View(dataset, rows, key_indices, None if unary else KEEP_OR_TUPLE)


class _Batch(list[Any]):
    """Examples of a batch, plus the columns they came from (for column-wise collation)."""

    def __init__(self, columns: tuple[Any, ...], keys: tuple[str, ...], mode: Mode) -> None:
        if mode is tuple:
            super().__init__(zip(*columns))
        elif mode is dict:
            super().__init__(dict(zip(keys, row)) for row in zip(*columns))
        else:
            super().__init__(columns[0])
        self.columns = columns
        self.keys = keys
        self.mode = mode


def _format_row(values: Sequence[Any], keys: tuple[str, ...], mode: Mode) -> Any:
    if mode is tuple:
        return tuple(values)
    if mode is dict:
        return dict(zip(keys, values))
    return values[0]


def _format_columns(columns: tuple[Any, ...], keys: tuple[str, ...], mode: Mode) -> Any:
    if mode is tuple:
        return columns
    if mode is dict:
        return dict(zip(keys, columns))
    return columns[0]


def _as_array(column: Any) -> Any:
    if isinstance(column, (np.ndarray, torch.Tensor)):
        return column
    return np.asarray(column)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
