"""The abstract :class:`TabularDataset` and the operations every table gets."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final, TypeAlias, overload

import numpy as np
import torch
from torch.utils.data import Dataset

from pytorch_pfn_extras.dataset._checks import is_integer
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
#: ``transform``'s second argument: ``[((input_keys, output_keys), fn), ...]`` or one callable.
TransformSpec: TypeAlias = (
    "Sequence[tuple[tuple[str | tuple[str, ...], str | tuple[str, ...]], Callable[..., Any]]]"
    " | Callable[..., Any]"
)

_ITER_CHUNK = 1024

#: View mode of a slice: the parent's mode, a tuple where the parent is unary.
KEEP_OR_TUPLE: Final = "keep-or-tuple"

if TYPE_CHECKING:
    from pytorch_pfn_extras.dataset.tabular._concat import Concat
    from pytorch_pfn_extras.dataset.tabular._join import Join
    from pytorch_pfn_extras.dataset.tabular._transform import Transform
    from pytorch_pfn_extras.dataset.tabular._view import View


class _Derived:
    """The tables that the operations of :class:`TabularDataset` build.

    They subclass :class:`TabularDataset`, so their modules are built on this one and this one
    cannot import them; ``pytorch_pfn_extras.dataset.tabular`` (whose ``__init__`` runs before
    any of its modules is used) hands them over with :func:`use_derived`.
    """

    View: type[View]
    Concat: type[Concat]
    Join: type[Join]
    Transform: type[Transform]


_derived = _Derived()


def use_derived(
    *, view: type[View], concat: type[Concat], join: type[Join], transform: type[Transform]
) -> None:
    """Set the classes that ``slice``, ``concat``, ``join`` and ``transform`` build."""
    _derived.View = view
    _derived.Concat = concat
    _derived.Join = join
    _derived.Transform = transform


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
            indices: The requested rows: ``None`` for all rows, a :class:`slice`, or a
                :class:`list` of ints. Rows asked as a slice arrive as the equivalent slice
                (slices of slices, reversed or stepped slices, each part of a concatenation; a
                view of every row as ``slice(None)``); anything else arrives as a list: rows
                picked by a list, an array or a mask, one example (``[i]``), DataLoader batches
                and iteration (in lists of up to 1024 rows). Indices given by the framework are
                always in range and non-negative.
            key_indices: The positions of the requested columns as a tuple of ints, or ``None``
                for all columns.

        Returns:
            A tuple with one column per requested key, in the requested order. A column is a
            list, a :class:`numpy.ndarray` or a :class:`torch.Tensor` holding the requested
            rows in the requested order.
        """

    # ------------------------------------------------------------------ internal fetch path

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        """Fetch validated rows/keys; views override this to compose indices without checks."""
        columns = self.get_examples(to_external(rows, len(self)), key_indices)
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
        return _derived.View(self, mode=tuple)

    def asdict(self) -> TabularDataset:
        """Return a view with dict mode."""
        return _derived.View(self, mode=dict)

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
        return _derived.View(self, converter=converter)

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
        return _derived.Concat(self, *datasets)

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
        return _derived.Join(self, *datasets)

    def transform(self, keys: str | tuple[str, ...], transform: TransformSpec) -> TabularDataset:
        """Apply a transform to each example.

        ``transform`` is a list of ``((input_keys, output_keys), fn)`` pairs. Each ``fn`` is
        called lazily, once per read row, with the values of its ``input_keys`` only (positional
        arguments when this dataset is in tuple or unary mode, keyword arguments in dict mode)
        and returns the values of its ``output_keys``: a tuple in that order, a dict keyed by
        them, or, for one output key, the value itself. Keys are a str or a tuple of str. The
        outputs of the pairs must not overlap and together must be exactly ``keys``. Reading some
        keys of the result (``result.slice[:, 'x']``) runs only the functions producing them and
        reads only their inputs.

        As a shorthand (not in PPE), ``transform`` may be one callable: it receives every column
        and returns every key of ``keys``.

        The mode of the result follows what the functions return: ``tuple`` for tuples, ``dict``
        for dicts; when each returns a single value, ``None`` for one key and ``tuple`` for
        several. ``keys`` given as one str always makes a unary table (mode ``None``).

        Args:
            keys: The keys of the result: a tuple of str, or one str for a unary table.
            transform: The ``((input_keys, output_keys), fn)`` pairs, or one callable.

        Returns:
            A dataset with keys ``keys`` and the same length.

        Raises:
            ValueError: If outputs overlap, do not give exactly ``keys``, or an input key is not
                a key of this dataset.
            TypeError: If ``transform`` is neither a list of such pairs nor a callable.

        Example:
            >>> from pytorch_pfn_extras.dataset import tabular
            >>> ds = tabular.from_data({'a': [1, 2], 'b': [10, 20]})
            >>> out = ds.transform(('sum', 'neg'), [
            ...     ((('a', 'b'), 'sum'), lambda a, b: a + b),
            ...     ((('a',), ('neg',)), lambda a: {'neg': -a}),
            ... ])
            >>> out[1]
            {'sum': 22, 'neg': -2}
            >>> out.slice[:, 'neg'].fetch()  # runs only the second function
            [-1, -2]
        """
        return _derived.Transform(self, keys, transform, batch=False)

    def transform_batch(
        self, keys: str | tuple[str, ...], transform_batch: TransformSpec
    ) -> TabularDataset:
        """Apply a transform to examples.

        Like :meth:`transform`, but each ``fn`` is called once per read, with whole columns
        (lists, arrays or tensors) of its ``input_keys``, and returns whole columns of its
        ``output_keys`` (a tuple or a dict of columns, or the column for one output key), so
        array code runs vectorised. Every returned column must keep the number of rows.

        Args:
            keys: The keys of the result: a tuple of str, or one str for a unary table.
            transform_batch: ``((input_keys, output_keys), fn)`` pairs, as for :meth:`transform`,
                or one callable of every column returning every key of ``keys``.

        Returns:
            A dataset with keys ``keys`` and the same length.

        Raises:
            ValueError: If outputs overlap, do not give exactly ``keys``, or an input key is not
                a key of this dataset.
            TypeError: If ``transform_batch`` is neither a list of such pairs nor a callable.

        Example:
            >>> import numpy as np
            >>> from pytorch_pfn_extras.dataset import tabular
            >>> ds = tabular.from_data({'a': np.arange(3), 'b': np.arange(3) * 10})
            >>> out = ds.transform_batch(('a', 'total'), [
            ...     ((('a',), 'a'), lambda a: a),
            ...     ((('a', 'b'), 'total'), lambda a, b: a + b),
            ... ])
            >>> out.fetch()[1]
            array([ 0, 11, 22])
        """
        return _derived.Transform(self, keys, transform_batch, batch=True)

    # ------------------------------------------------------------------ data access

    def fetch(self) -> Any:
        """Fetch data.

        Fetches all the data of the dataset/view as columns (column-major): a tuple of columns in
        tuple mode, a dict of columns in dict mode, the column in unary mode. Array-backed
        columns come back as arrays (possibly sharing memory with the source).
        """
        return arrange(self._get_rows(None, None), self.keys, self.mode)

    def convert(self, data: Any) -> Any:
        """Convert fetched data.

        Takes data returned by :meth:`fetch` and prepares it for a model. By default each column
        becomes a :class:`numpy.ndarray` (tensors and arrays are kept as they are). Override it
        in a subclass or with :meth:`with_converter`. Every view (``slice``, :meth:`astuple`,
        :meth:`asdict`, :meth:`transform`, :meth:`transform_batch`) converts as its source
        does, and a concatenated or joined dataset as its first dataset, so a subclass's
        ``convert`` holds through any chain of views (``collate_fn=view.convert``).

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
        columns = self._get_rows(i, None)
        return arrange([column[0] for column in columns], self.keys, self.mode)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(
        self, index: builtins.slice | Sequence[int] | np.ndarray[Any, Any]
    ) -> list[Any]: ...

    def __getitem__(self, index: Any) -> Any:
        """One example for an int; a list of examples for a slice, sequence or mask."""
        if is_integer(index):
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
            # an index array, not a range: a user's source gets a list, as PPE's per-row reads
            chunk = np.arange(start, min(start + _ITER_CHUNK, length), dtype=np.intp)
            columns = self._get_rows(chunk, None)
            yield from _Batch(columns, self.keys, self.mode)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rows={len(self)} keys={self.keys!r}>"


class _SliceHelper:
    """``dataset.slice[rows, keys]``."""

    def __init__(self, dataset: TabularDataset) -> None:
        self._dataset = dataset

    def __getitem__(self, args: Any) -> TabularDataset:
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
            return _derived.View(dataset, rows)
        key_indices, unary = check_keys(keys_arg, dataset.keys)
        return _derived.View(dataset, rows, key_indices, None if unary else KEEP_OR_TUPLE)


class _Batch(list[Any]):
    """Examples of a batch, plus the columns they came from (for column-wise collation)."""

    def __init__(self, columns: tuple[Any, ...], keys: tuple[str, ...], mode: Mode) -> None:
        super().__init__(arrange_rows(columns, keys, mode))
        self.columns = columns
        self.keys = keys
        self.mode = mode


def arrange(values: Sequence[Any], keys: tuple[str, ...], mode: Mode) -> Any:
    """Arrange one item per key as ``mode`` says: a tuple for ``tuple`` (``values`` itself if
    it is one), a dict by key for ``dict``, the only item for ``None`` (unary).

    The items of one row make an example; the columns make what :meth:`TabularDataset.fetch`
    returns.
    """
    if mode is tuple:
        return tuple(values)
    if mode is dict:
        return dict(zip(keys, values))
    return values[0]


def arrange_rows(columns: Sequence[Any], keys: tuple[str, ...], mode: Mode) -> Iterator[Any]:
    """``arrange(row, keys, mode)`` for each row of ``columns``, in order.

    The same dispatch as :func:`arrange`, kept apart for speed: the examples come from C
    iterators, without a Python call per row. A call to :func:`arrange` per row made iterating
    a table 25% slower (80% for a unary one) and the dict batches read by
    ``torch.utils.data.DataLoader`` 10% slower (timeit; those batches are the DataLoader
    epochs of ``benchmarks/tabular.py --loader``).
    """
    if mode is tuple:
        return zip(*columns)
    if mode is dict:
        return map(dict, map(zip, repeat(keys), zip(*columns)))
    return iter(columns[0])


def _as_array(column: Any) -> Any:
    if isinstance(column, (np.ndarray, torch.Tensor)):
        return column
    return np.asarray(column)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
