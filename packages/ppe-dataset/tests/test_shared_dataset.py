"""SharedDataset: a shared-memory cache that DataLoader worker processes fill and read."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

from pytorch_pfn_extras.dataset import (
    InfiniteCache,
    ItemNotFoundException,
    SharedDataset,
    shared_dataset,
)
from pytorch_pfn_extras.dataset.shared_dataset import Cache

needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
# Python >= 3.12 warns when forking a process that runs threads (torch's pools); the workers
# only touch shared tensors, which is safe.
fork_warning = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork\\(\\) may lead to deadlocks"
)


class CountingSource(SharedDataset):
    """Loads item ``i`` as ``[i, i*i]`` from a slow source, counting reads across processes."""

    def __init__(self, n: int) -> None:
        super().__init__((n, 2), dtype=torch.int64)
        self.n = n
        self.reads = torch.zeros(n, dtype=torch.int64).share_memory_()
        self.cached_by = torch.full((n,), -2, dtype=torch.int64).share_memory_()
        self.served_by = torch.full((n,), -2, dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int) -> Any:
        info = get_worker_info()
        worker = -1 if info is None else info.id
        try:
            x = super().__getitem__(idx)
            self.served_by[idx] = worker
        except ItemNotFoundException:
            self.reads[idx] += 1
            x = torch.tensor([idx, idx * idx])
            self.cache_item(idx, x)
            self.cached_by[idx] = worker
        return x


def test_items_are_missing_until_cached() -> None:
    ds = CountingSource(4)
    assert not ds.is_cached(2)
    with pytest.raises(ItemNotFoundException, match="item 2 is not cached"):
        SharedDataset.__getitem__(ds, 2)
    assert issubclass(ItemNotFoundException, LookupError)
    assert ds[2].tolist() == [2, 4]
    assert ds.is_cached(2)
    assert ds[2].tolist() == [2, 4]
    assert ds.reads.tolist() == [0, 0, 1, 0]


def test_cached_values_are_copies_with_the_storage_dtype() -> None:
    ds = SharedDataset((3,), dtype=torch.int64)
    ds.cache_item(0, 2**40 + 1)
    value = ds[0]
    assert value.item() == 2**40 + 1
    value += 1
    assert ds[0].item() == 2**40 + 1
    default = SharedDataset((2, 3))
    default.cache_item(-1, [1, 2, 3])
    assert default[1].dtype == torch.float32
    assert default[1].tolist() == [1.0, 2.0, 3.0]
    assert len(default.cache) == 2  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda ds: ds.cache_item(0, torch.zeros(3)),
            ValueError,
            r"cannot cache item 0: its shape is \(3,\) but the cache holds items of shape \(2,\)",
        ),
        (
            lambda ds: ds.cache_item(4, torch.zeros(2)),
            IndexError,
            "index 4 is out of range for a cache of 4 items",
        ),
        (lambda ds: ds.is_cached(-5), IndexError, "index -5 is out of range"),
        (lambda ds: ds.is_cached(1.0), TypeError, "cache index must be an int, got float 1.0"),
    ],
)
def test_bad_cache_access_names_the_value(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call(SharedDataset((4, 2)))


@pytest.mark.parametrize("sm_size", [(), (-1, 2), (2.5,), "abc"])
def test_bad_storage_shape_is_rejected(sm_size: Any) -> None:
    with pytest.raises(ValueError, match="sm_size must be the storage shape"):
        SharedDataset(sm_size)


def test_custom_cache_type_receives_sm_size() -> None:
    created: list[Any] = []

    class DictCache:
        def __init__(self, sm_size: Any) -> None:
            created.append(sm_size)
            self.items: dict[int, Any] = {}

        def is_cached(self, idx: int) -> bool:
            return idx in self.items

        def add_to_cache(self, idx: int, value: Any) -> None:
            self.items[idx] = value

        def get_value(self, idx: int) -> Any:
            if idx not in self.items:
                raise ItemNotFoundException(idx)
            return self.items[idx]

    ds = SharedDataset(7, cache_type=DictCache)
    assert created == [7]
    ds.cache_item(3, "x")
    assert ds.is_cached(3)
    assert ds[3] == "x"
    assert isinstance(SharedDataset(2).cache, InfiniteCache)


@needs_fork
@fork_warning
def test_dataloader_workers_share_the_cache_and_read_each_item_once() -> None:
    n, batch = 16, 4
    ds = CountingSource(n)
    # Epoch 1: batches 0, 2 go to worker 0 and 1, 3 to worker 1 (round robin).
    first = DataLoader(ds, batch_size=batch, num_workers=2, multiprocessing_context="fork")
    assert torch.cat(list(first)).tolist() == [[i, i * i] for i in range(n)]
    assert ds.reads.tolist() == [1] * n
    assert set(ds.cached_by.tolist()) == {0, 1}
    # Epoch 2, fresh worker processes, order shifted by one batch: every batch now goes to the
    # worker that did not cache it.
    order = list(range(batch, n)) + list(range(batch))
    second = DataLoader(
        ds, batch_size=batch, sampler=order, num_workers=2, multiprocessing_context="fork"
    )
    assert torch.cat(list(second)).tolist() == [[i, i * i] for i in order]
    assert ds.reads.tolist() == [1] * n
    served, cached = ds.served_by, ds.cached_by
    assert bool((served >= 0).all())
    assert bool((served != cached).all())


class _DictCache(Cache):
    """A user's cache written against PPE's ``shared_dataset.Cache`` base class."""

    def __init__(self, sm_size: int) -> None:
        self.items: dict[int, Any] = {}

    def is_cached(self, idx: int) -> bool:
        return idx in self.items

    def add_to_cache(self, idx: int, x: Any) -> None:
        self.items[idx] = x

    def get_value(self, idx: int) -> Any:
        try:
            return self.items[idx]
        except KeyError:
            raise ItemNotFoundException(idx) from None


def test_a_cache_subclassing_ppe_cache_serves_the_dataset() -> None:
    ds = SharedDataset(4, cache_type=_DictCache)
    assert isinstance(ds.cache, Cache) and not ds.is_cached(idx=1)
    ds.cache_item(idx=1, x="one")
    assert ds.is_cached(1) and ds[1] == "one"
    with pytest.raises(ItemNotFoundException):
        ds[2]


def test_a_cache_subclass_must_implement_every_method() -> None:
    class Incomplete(Cache):
        def is_cached(self, idx: int) -> bool:
            return False

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_infinite_cache_takes_ppe09_arguments() -> None:
    cache = InfiniteCache(3)
    assert isinstance(cache, Cache)
    cache.add_to_cache(idx=0, x=torch.tensor(2.0))
    assert cache.get_value(idx=0).item() == 2.0
    integers = InfiniteCache(3, dtype=torch.int64)  # dtype: ours, keyword-only
    integers.add_to_cache(0, 2)
    assert integers.get_value(0).dtype == torch.int64
    with pytest.raises(TypeError, match="positional"):
        InfiniteCache(3, torch.int64)  # type: ignore[misc]


def test_ppe_module_path_holds_the_same_classes() -> None:
    assert shared_dataset.SharedDataset is SharedDataset
    assert shared_dataset.InfiniteCache is InfiniteCache
    assert shared_dataset.ItemNotFoundException is ItemNotFoundException
    assert sorted(shared_dataset.__all__) == [
        "Cache",
        "InfiniteCache",
        "ItemNotFoundException",
        "SharedDataset",
    ]
