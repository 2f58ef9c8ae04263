"""Consistent copies of write targets for asynchronous writers.

An asynchronous writer saves the target later, on another thread or process,
while training keeps updating tensors in place. The copy taken when the write
is requested is what gets saved: containers are copied, and every tensor is
copied to CPU memory storage by storage, so views and tied weights keep sharing
memory exactly as ``torch.save`` would record them.

For process writers, :func:`pack` puts all tensor data in one flat buffer, so a
target with thousands of tensors crosses the process boundary as one shared
memory block (one file descriptor), and :func:`unpack` rebuilds it without
copying: each storage of the rebuilt target is a view of its span of the buffer.

A buffer that will be pickled is allocated in shared memory right away
(``shared=True``): letting pickling move an ordinary 8 MB buffer into shared
memory, write after write, makes glibc's heap grow without bound in both
processes (``benchmarks/queue_writer_memory.py --writer ProcessQueueWriter``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy
import torch

__all__ = ["PackedTarget", "pack", "snapshot", "unpack"]

_ATOMIC: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        range,
        slice,
        type,
        torch.dtype,
        torch.device,
        torch.Size,
        torch.layout,
        torch.memory_format,
    }
)
_ALIGN = 64


def _is_plain_strided(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and not tensor.is_nested
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor.device.type != "meta"
    )


def _storage_key(storage: torch.UntypedStorage) -> tuple[str, int, int]:
    return (str(storage.device), storage.data_ptr(), storage.nbytes())


def _finish(source: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    if isinstance(source, torch.nn.Parameter):
        return torch.nn.Parameter(new, requires_grad=source.requires_grad)
    if source.requires_grad:
        new.requires_grad_(True)
    return new


def _bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class _Copier:
    """Copies containers recursively; tensors go through :meth:`tensor`."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}

    def tensor(self, tensor: torch.Tensor) -> Any:
        raise NotImplementedError

    def copy(self, obj: Any) -> Any:
        cls = type(obj)
        if cls in _ATOMIC:
            return obj
        key = id(obj)
        memo = self.memo
        if key in memo:
            return memo[key]
        new: Any
        if isinstance(obj, torch.Tensor):
            new = self.tensor(obj)
        elif cls is dict:
            new = {}
            memo[key] = new
            for name, value in obj.items():
                new[name] = self.copy(value)
        elif cls is list:
            new = []
            memo[key] = new
            new.extend([self.copy(value) for value in obj])
        elif cls is tuple:
            new = tuple([self.copy(value) for value in obj])
        elif isinstance(obj, tuple) and hasattr(cls, "_fields"):  # namedtuple
            new = cls(*[self.copy(value) for value in obj])
        elif isinstance(obj, dict):  # OrderedDict (with a state dict's _metadata), defaultdict...
            new = copy.copy(obj)
            memo[key] = new
            for name, value in obj.items():
                new[name] = self.copy(value)
        elif isinstance(obj, numpy.ndarray):
            new = obj.copy()
        else:
            try:
                new = copy.deepcopy(obj, memo)
            except Exception as exc:
                message = (
                    f"an asynchronous writer copies its target when the write is requested, "
                    f"but an object of type {cls.__module__}.{cls.__qualname__} cannot be "
                    f"copied ({exc}); pass a state dict (tensors, containers, plain values)"
                )
                raise TypeError(message) from exc
        memo[key] = new
        return new


class _CloneCopier(_Copier):
    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[tuple[str, int, int], torch.UntypedStorage] = {}

    def tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if not _is_plain_strided(tensor):
            return _finish(tensor, tensor.detach().to("cpu", copy=True))
        storage = tensor.untyped_storage()
        key = _storage_key(storage)
        cloned = self.storages.get(key)
        if cloned is None:
            cloned = _bytes_view(storage).to("cpu", copy=True).untyped_storage()
            self.storages[key] = cloned
        new = torch.empty(0, dtype=tensor.dtype).set_(
            cloned, tensor.storage_offset(), tensor.size(), tensor.stride()
        )
        return _finish(tensor, new)


def snapshot(target: Any) -> Any:
    """Copy ``target`` with every tensor copied to CPU (sharing preserved)."""
    return _CloneCopier().copy(target)


@dataclass(frozen=True)
class _TensorRef:
    index: int
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    requires_grad: bool
    parameter: bool


class PackedTarget:
    """A target whose tensor storages live in one flat CPU byte buffer."""

    __slots__ = ("buffer", "skeleton", "spans")

    def __init__(self, skeleton: Any, buffer: torch.Tensor, spans: list[tuple[int, int]]) -> None:
        self.skeleton = skeleton
        self.buffer = buffer
        self.spans = spans

    def __getstate__(self) -> tuple[Any, torch.Tensor, list[tuple[int, int]]]:
        return (self.skeleton, self.buffer, self.spans)

    def __setstate__(self, state: tuple[Any, torch.Tensor, list[tuple[int, int]]]) -> None:
        self.skeleton, self.buffer, self.spans = state


class _PackCopier(_Copier):
    def __init__(self) -> None:
        super().__init__()
        self.indices: dict[tuple[str, int, int], int] = {}
        self.sources: list[torch.UntypedStorage] = []

    def tensor(self, tensor: torch.Tensor) -> Any:
        if not _is_plain_strided(tensor):
            return _finish(tensor, tensor.detach().to("cpu", copy=True))
        storage = tensor.untyped_storage()
        key = _storage_key(storage)
        index = self.indices.get(key)
        if index is None:
            index = self.indices[key] = len(self.sources)
            self.sources.append(storage)
        return _TensorRef(
            index,
            tensor.dtype,
            tuple(tensor.size()),
            tuple(tensor.stride()),
            int(tensor.storage_offset()),
            tensor.requires_grad,
            isinstance(tensor, torch.nn.Parameter),
        )


def pack(target: Any, *, shared: bool = False) -> PackedTarget:
    """Copy ``target`` for another process: tensor data goes to one flat buffer.

    Args:
        target: The object to copy.
        shared: Allocate the buffer in shared memory (for a target that will be
            pickled to another process; a forked child inherits an ordinary one).
    """
    copier = _PackCopier()
    skeleton = copier.copy(target)
    spans: list[tuple[int, int]] = []
    total = 0
    for storage in copier.sources:
        nbytes = storage.nbytes()
        spans.append((total, nbytes))
        total += -(-nbytes // _ALIGN) * _ALIGN
    if shared and total:
        # torch's own allocator for storages sent to other processes (honours the sharing
        # strategy); a heap buffer would be copied there by pickling.
        memory = torch.UntypedStorage._new_shared(total)  # type: ignore[no-untyped-call]
        buffer = torch.empty(0, dtype=torch.uint8).set_(memory)
    else:
        buffer = torch.empty(total, dtype=torch.uint8)
    for storage, (offset, nbytes) in zip(copier.sources, spans):
        if nbytes:
            buffer[offset : offset + nbytes].copy_(_bytes_view(storage))
    return PackedTarget(skeleton, buffer, spans)


class _Unpacker:
    def __init__(self, packed: PackedTarget) -> None:
        self.packed = packed
        self.memory: numpy.ndarray[Any, Any] | None = None
        self.storages: dict[int, torch.UntypedStorage] = {}
        self.visited: set[int] = set()
        self.tensors: dict[int, torch.Tensor] = {}

    def storage(self, index: int) -> torch.UntypedStorage:
        storage = self.storages.get(index)
        if storage is None:
            offset, nbytes = self.packed.spans[index]
            if nbytes == 0:
                storage = torch.empty(0, dtype=torch.uint8).untyped_storage()
            else:
                # A storage of its own over the span (saved as its own bytes, like the
                # original), sharing the buffer's memory instead of copying it.
                if self.memory is None:
                    self.memory = self.packed.buffer.numpy()
                span = self.memory[offset : offset + nbytes]
                storage = torch.frombuffer(span, dtype=torch.uint8).untyped_storage()
            self.storages[index] = storage
        return storage

    def tensor(self, ref: _TensorRef) -> torch.Tensor:
        # pack() memoises tensors, so one tensor is one _TensorRef object.
        new = self.tensors.get(id(ref))
        if new is None:
            new = self.tensors[id(ref)] = self._rebuild(ref)
        return new

    def _rebuild(self, ref: _TensorRef) -> torch.Tensor:
        new = torch.empty(0, dtype=ref.dtype).set_(
            self.storage(ref.index), ref.storage_offset, ref.size, ref.stride
        )
        if ref.parameter:
            return torch.nn.Parameter(new, requires_grad=ref.requires_grad)
        if ref.requires_grad:
            new.requires_grad_(True)
        return new

    def fill(self, obj: Any) -> Any:
        # The skeleton's containers were created by pack(): they are ours to edit.
        if isinstance(obj, _TensorRef):
            return self.tensor(obj)
        if isinstance(obj, dict | list):
            if id(obj) in self.visited:
                return obj
            self.visited.add(id(obj))
            if isinstance(obj, dict):
                for name, value in list(obj.items()):
                    obj[name] = self.fill(value)
            else:
                obj[:] = [self.fill(value) for value in obj]
            return obj
        if isinstance(obj, tuple):
            values = [self.fill(value) for value in obj]
            if type(obj) is tuple:
                return tuple(values)
            if hasattr(type(obj), "_fields"):
                return type(obj)(*values)
        return obj


def unpack(packed: PackedTarget) -> Any:
    """Rebuild the target packed by :func:`pack`; its storages are views of the buffer."""
    return _Unpacker(packed).fill(packed.skeleton)
