"""``DataLoader``: torch's DataLoader, with batched fetch and column-wise collation of tables."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch.utils.data

from pytorch_pfn_extras.dataloaders._collate import TabularCollate
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import TabularDataset


class DataLoader(torch.utils.data.DataLoader[Any]):
    """A :class:`torch.utils.data.DataLoader` that reads TabularDataset batches column-wise.

    Takes exactly the arguments of :class:`torch.utils.data.DataLoader` and behaves the same for
    every dataset. For a :class:`~pytorch_pfn_extras.dataset.TabularDataset` with automatic
    batching and no ``collate_fn``, each batch is fetched with one ``get_examples`` call and each
    array column becomes a tensor in one step, instead of one ``__getitem__`` and one small tensor
    per example. The batches are the ones ``default_collate`` would build: a list of tensors
    (tuple mode), a dict of tensors (dict mode) or a tensor (unary mode).

    Example:
        >>> table = tabular.from_data({"x": np.random.rand(1000, 3), "t": np.arange(1000)})
        >>> loader = DataLoader(table, batch_size=32, shuffle=True, num_workers=2)
        >>> batch = next(iter(loader))  # {"x": tensor of shape (32, 3), "t": tensor (32,)}
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        batched = batch_sampler is not None or batch_size is not None
        if collate_fn is None and batched and isinstance(dataset, TabularDataset):
            collate_fn = TabularCollate()
        super().__init__(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            *args,
            **kwargs,
        )

    # The arguments after ``collate_fn`` go to torch unchanged: show torch's signature (that of
    # the installed version) to ``inspect``, ``help()`` and IDEs, as PPE 0.9, whose DataLoader
    # is torch's class.
    __init__.__signature__ = inspect.signature(  # type: ignore[attr-defined]
        torch.utils.data.DataLoader.__init__
    )
