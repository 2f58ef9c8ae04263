"""``SharedDataset``: items cached in shared memory, visible to every DataLoader worker."""

from __future__ import annotations

import abc
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch.utils.data import Dataset

from pytorch_pfn_extras.dataset._checks import is_integer


class ItemNotFoundException(LookupError):
    """Raised when an item is looked up in a cache that does not hold it yet."""


@runtime_checkable
class Cache(Protocol):
    """What :class:`SharedDataset` needs from its cache.

    Subclass it, as PPE's caches do (a subclass must implement the three methods), or write
    any class with these methods.
    """

    @abc.abstractmethod
    def is_cached(self, idx: int) -> bool:
        """Whether item ``idx`` is in the cache."""

    @abc.abstractmethod
    def add_to_cache(self, idx: int, x: Any) -> None:
        """Store ``x`` as item ``idx``."""

    @abc.abstractmethod
    def get_value(self, idx: int) -> Any:
        """Item ``idx``; raises :class:`ItemNotFoundException` if it is not cached."""


class InfiniteCache(Cache):
    """A cache that holds every item, preallocated in shared memory and never evicted.

    The storage is a tensor of shape ``sm_size`` (one item per row: ``sm_size[0]`` items of
    shape ``sm_size[1:]``) plus one "cached" flag per item, both in shared memory. Processes
    forked or spawned from the one that created the cache (DataLoader workers) share them: an
    item cached by one worker is read by all the others, across epochs.

    Args:
        sm_size: Shape of the storage (an int means items are scalars).
        dtype: Element type of the storage; cached values are converted to it.
    """

    def __init__(self, sm_size: int | Sequence[int], *, dtype: torch.dtype = torch.float32) -> None:
        shape = _as_shape(sm_size)
        self._data = _shared_zeros(shape, dtype)
        self._flags = _shared_zeros(shape[:1], torch.bool)
        self._item_shape = torch.Size(shape[1:])

    def __len__(self) -> int:
        return len(self._flags)

    def is_cached(self, idx: int) -> bool:
        """Whether item ``idx`` is in the cache."""
        return bool(self._flags[self._check(idx)])

    def add_to_cache(self, idx: int, x: Any) -> None:
        """Store ``x`` (a tensor, array or number of the item shape) as item ``idx``."""
        i = self._check(idx)
        tensor = torch.as_tensor(x)
        if tensor.shape != self._item_shape:
            message = (
                f"cannot cache item {i}: its shape is {tuple(tensor.shape)} but the cache holds "
                f"items of shape {tuple(self._item_shape)}"
            )
            raise ValueError(message)
        self._data[i].copy_(tensor)
        self._flags[i] = True  # written after the data: a reader seeing the flag sees the item

    def get_value(self, idx: int) -> torch.Tensor:
        """A copy of item ``idx``.

        Raises:
            ItemNotFoundException: If the item is not cached.
        """
        i = self._check(idx)
        if not self._flags[i]:
            message = f"item {i} is not cached"
            raise ItemNotFoundException(message)
        return self._data[i].clone()

    def _check(self, idx: Any) -> int:
        size = len(self._flags)
        if not is_integer(idx):
            message = f"cache index must be an int, got {type(idx).__name__} {idx!r}"
            raise TypeError(message)
        i = int(idx)
        if not -size <= i < size:
            message = f"index {i} is out of range for a cache of {size} items"
            raise IndexError(message)
        return i + size if i < 0 else i


class SharedDataset(Dataset[Any]):
    """Dataset that caches the load samples in shared memory.

    Subclass it, load an item the slow way when :meth:`__getitem__` of this class raises
    :class:`ItemNotFoundException`, and store it with :meth:`cache_item`; DataLoader workers
    (which inherit the shared memory) then read it from the cache, whichever worker cached it.

    Args:
        sm_size: Shape of the shared storage: ``(number_of_items, *item_shape)``.
        cache_type: Called as ``cache_type(sm_size)`` to create the cache (a :class:`Cache`:
            an object with ``is_cached``, ``add_to_cache`` and ``get_value``).
        dtype: Element type of the storage (``cache_type(sm_size, dtype=dtype)``); the cache's
            default (``torch.float32`` for :class:`InfiniteCache`) when ``None``.

    Example:
        >>> class Images(SharedDataset):
        ...     def __init__(self, paths):
        ...         super().__init__((len(paths), 3, 32, 32))
        ...         self.paths = paths
        ...     def __len__(self):
        ...         return len(self.paths)
        ...     def __getitem__(self, idx):
        ...         try:
        ...             return super().__getitem__(idx)
        ...         except ItemNotFoundException:
        ...             x = load_image(self.paths[idx])
        ...             self.cache_item(idx, x)
        ...             return x
    """

    def __init__(
        self,
        sm_size: int | Sequence[int],
        cache_type: Callable[..., Cache] = InfiniteCache,
        *,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if dtype is None:
            self.cache = cache_type(sm_size)
        else:
            self.cache = cache_type(sm_size, dtype=dtype)

    def is_cached(self, idx: int) -> bool:
        """Whether item ``idx`` has been cached (by this or any other worker)."""
        return self.cache.is_cached(idx)

    def cache_item(self, idx: int, x: Any) -> None:
        """Cache ``x`` as item ``idx``, for every process sharing this dataset."""
        self.cache.add_to_cache(idx, x)

    def __getitem__(self, idx: int) -> Any:
        """The cached item ``idx``.

        Raises:
            ItemNotFoundException: If it is not cached yet.
        """
        return self.cache.get_value(idx)


def _shared_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    tensor = torch.zeros(shape, dtype=dtype)
    tensor.share_memory_()  # type: ignore[no-untyped-call]
    return tensor


def _as_shape(sm_size: int | Sequence[int]) -> tuple[int, ...]:
    dims: tuple[Any, ...] = (sm_size,) if isinstance(sm_size, numbers.Integral) else tuple(sm_size)  # type: ignore[arg-type]
    if not dims or not all(is_integer(d) and int(d) >= 0 for d in dims):
        message = (
            f"sm_size must be the storage shape (number of items, *item shape) as non-negative "
            f"ints, got {sm_size!r}"
        )
        raise ValueError(message)
    return tuple(int(d) for d in dims)
