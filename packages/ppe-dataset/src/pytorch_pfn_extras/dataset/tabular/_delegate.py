"""``DelegateDataset``: a base for custom tables built from other tables."""

from __future__ import annotations

from typing import Any

from pytorch_pfn_extras.dataset.tabular._indexing import KeyIndices, Rows
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import Mode, TabularDataset


class DelegateDataset(TabularDataset):
    """A helper class to implement a TabularDataset.

    Wraps a :class:`~pytorch_pfn_extras.dataset.TabularDataset` and forwards :meth:`__len__`,
    :attr:`keys`, :attr:`mode`, :meth:`get_examples` and :meth:`convert` to it. Inherit from it
    to give a table built with :func:`~pytorch_pfn_extras.dataset.tabular.from_data` (or any
    composition) a class of its own.

    Args:
        dataset: The underlying dataset.

    Example:
        >>> import numpy as np
        >>> from pytorch_pfn_extras.dataset import tabular
        >>> class MyDataset(tabular.DelegateDataset):
        ...     def __init__(self):
        ...         super().__init__(tabular.from_data((
        ...             ('a', np.arange(10)),
        ...             ('b', self.get_b),
        ...             (('d', 'e'), self.get_de))))
        ...     def get_b(self, i):
        ...         return 'b[{}]'.format(i)
        ...     def get_de(self, i):
        ...         return {'d': 'd[{}]'.format(i), 'e': 'e[{}]'.format(i)}
        >>> ds = MyDataset()
        >>> ds.keys
        ('a', 'b', 'd', 'e')
        >>> ds[0]
        (np.int64(0), 'b[0]', 'd[0]', 'e[0]')
    """

    def __init__(self, dataset: TabularDataset) -> None:
        if not isinstance(dataset, TabularDataset):
            message = f"DelegateDataset wraps a TabularDataset, got {type(dataset).__name__}"
            raise TypeError(message)
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def keys(self) -> tuple[str, ...]:
        return self.dataset.keys

    @property
    def mode(self) -> Mode:
        return self.dataset.mode

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self.dataset.get_examples(indices, key_indices)

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        if type(self).get_examples is DelegateDataset.get_examples:
            return self.dataset._get_rows(rows, key_indices)  # skip re-validating our own indices
        return super()._get_rows(rows, key_indices)

    def convert(self, data: Any) -> Any:
        return self.dataset.convert(data)
