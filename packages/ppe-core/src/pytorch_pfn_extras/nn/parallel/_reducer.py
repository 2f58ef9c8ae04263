"""The default gradient averaging of DistributedDataParallel, overlapped with backward.

Parameters are packed, in reverse registration order (roughly the order in which backward
produces their gradients), into buckets of one device and dtype: a small first bucket, so that
communication starts early, then larger ones. Each bucket is one flat buffer holding its
gradients followed by one "has a gradient" flag per parameter. During a synchronized backward
pass, a post-accumulate-grad hook marks each parameter ready; a bucket whose parameters are all
ready is all-reduced asynchronously while backward goes on. Buckets are launched strictly in
index order, so every rank issues the same collectives in the same order whatever its graph:
at the end of backward the buckets not launched yet (a parameter without a gradient on this
rank, or comm hooks that must run first) are launched with zeros and a 0 flag for the missing
gradients. After the reduction, a parameter whose flags sum to more than 0 gets the average
over the ranks (a missing gradient counts as zero); one that no rank produced keeps no
gradient. The flags replace a separate negotiation collective.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# Bucket capacities (bytes): the first bucket small so that its all-reduce starts early in
# backward, the others large so that the collectives stay few (torch's DDP uses the same).
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_BYTES = 25 * 1024 * 1024


class _Bucket:
    """Parameters reduced together through one flat buffer (gradients, then flags)."""

    __slots__ = ("buffer", "names", "numel", "offsets", "params", "pending")

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]]) -> None:
        self.names = [name for name, _ in named]
        self.params = [param for _, param in named]
        self.offsets: list[int] = []
        offset = 0
        for param in self.params:
            self.offsets.append(offset)
            offset += param.numel()
        self.numel = offset
        self.pending = len(self.params)
        self.buffer: torch.Tensor | None = None

    def pack(self) -> torch.Tensor:
        """Copy the gradients (zeros where missing) and their flags into the buffer."""
        first = self.params[0]
        buffer = self.buffer
        if buffer is None:
            buffer = torch.empty(
                self.numel + len(self.params), dtype=first.dtype, device=first.device
            )
            self.buffer = buffer
        flags = []
        for index, (param, offset) in enumerate(zip(self.params, self.offsets)):
            grad = param.grad
            target = buffer[offset : offset + param.numel()].view_as(param)
            if grad is None:
                target.zero_()
                flags.append(0.0)
            else:
                _check_dense(grad, self.names[index])
                target.copy_(grad)
                flags.append(1.0)
        buffer[self.numel :].copy_(torch.tensor(flags))
        return buffer

    def unpack(self, world_size: int) -> None:
        """Give each parameter some rank produced the average of the reduced gradients."""
        buffer = self.buffer
        assert buffer is not None
        produced = buffer[self.numel :].tolist()
        for param, offset, flag in zip(self.params, self.offsets, produced):
            if flag <= 0:
                continue
            reduced = buffer[offset : offset + param.numel()].view_as(param)
            if param.grad is None:
                param.grad = reduced / world_size
            else:  # divided and copied in one pass
                torch.div(reduced, world_size, out=param.grad)


def _check_dense(grad: torch.Tensor, name: str) -> None:
    if grad.layout != torch.strided:
        message = (
            "the default reduce function of DistributedDataParallel handles dense tensors "
            f"only, got a {grad.layout} tensor of shape {tuple(grad.shape)} as the gradient "
            f"of {name!r}; pass your own reduce_function"
        )
        raise ValueError(message)


def _make_buckets(named: Sequence[tuple[str, torch.nn.Parameter]]) -> list[_Bucket]:
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.nn.Parameter]]] = {}
    for name, param in reversed(named):
        groups.setdefault((param.device, param.dtype), []).append((name, param))
    buckets: list[_Bucket] = []
    for group in groups.values():
        current: list[tuple[str, torch.nn.Parameter]] = []
        size = 0
        capacity = FIRST_BUCKET_BYTES
        for name, param in group:
            current.append((name, param))
            size += param.numel() * param.element_size()
            if size >= capacity:  # closed once full, as torch's DDP does
                buckets.append(_Bucket(current))
                current, size, capacity = [], 0, BUCKET_BYTES
        if current:
            buckets.append(_Bucket(current))
    return buckets


def missing_gradients_error(names: Sequence[str]) -> RuntimeError:
    """The error of ``negotiate_grads=False`` when parameters got no gradient."""
    message = (
        "DistributedDataParallel(negotiate_grads=False): these parameters require a gradient "
        f"but got none in this backward pass: {list(names)}. With negotiate_grads=False every "
        "rank must produce a gradient for every such parameter; pass negotiate_grads=True to "
        "treat a missing gradient as zero (averaged with the other ranks' gradients), or set "
        "requires_grad=False on the parameters the model does not use"
    )
    return RuntimeError(message)


class Reducer:
    """Averages the gradients of ``module``'s parameters over ``group`` (see the module doc).

    Args:
        module: The module whose parameters are reduced.
        group: The process group (``None``: the default group).
        negotiate_grads: Whether a missing gradient counts as zero; else it is an error.
    """

    def __init__(
        self, module: torch.nn.Module, group: ProcessGroup | None, negotiate_grads: bool
    ) -> None:
        self._module = module
        self._group = group
        self._negotiate_grads = negotiate_grads
        self._layout: list[tuple[int, bool]] = []
        self._buckets: list[_Bucket] = []
        self._bucket_of: dict[int, _Bucket] = {}
        self._handles: list[RemovableHandle] = []
        self._armed = False
        self._overlap = False
        self._next = 0  # index of the next bucket to launch
        self._works: list[tuple[_Bucket, Any]] = []

    def _refresh(self) -> None:
        """(Re)build the buckets when the parameters or their ``requires_grad`` changed."""
        named = list(self._module.named_parameters())
        layout = [(id(param), param.requires_grad) for _, param in named]
        if layout == self._layout:
            return
        self._layout = layout
        for handle in self._handles:
            handle.remove()
        self._buckets = _make_buckets([(n, p) for n, p in named if p.requires_grad])
        self._bucket_of = {id(p): bucket for bucket in self._buckets for p in bucket.params}
        this = weakref.ref(self)

        def on_grad(param: torch.Tensor) -> None:
            reducer = this()
            if reducer is not None and reducer._armed and reducer._overlap:
                reducer._ready(param)

        self._handles = [
            param.register_post_accumulate_grad_hook(on_grad)  # type: ignore[no-untyped-call]
            for bucket in self._buckets
            for param in bucket.params
        ]

    def arm(self, overlap: bool) -> None:
        """Prepare for a synchronized backward pass (its gradients launch buckets if
        ``overlap``; otherwise everything is reduced by :meth:`finish`)."""
        self._refresh()
        for bucket in self._buckets:
            bucket.pending = len(bucket.params)
        self._next = 0
        self._works = []
        self._overlap = overlap
        self._armed = True

    def _ready(self, param: torch.Tensor) -> None:
        bucket = self._bucket_of.get(id(param))
        if bucket is None:
            return
        bucket.pending -= 1
        buckets = self._buckets
        try:
            while self._next < len(buckets) and buckets[self._next].pending <= 0:
                self._launch(buckets[self._next])
                self._next += 1
        except BaseException:
            self._armed = False  # this backward fails: later ones reduce nothing until re-armed
            raise

    def _launch(self, bucket: _Bucket) -> None:
        buffer = bucket.pack()
        work = dist.all_reduce(buffer, group=self._group, async_op=True)
        self._works.append((bucket, work))

    def finish(self) -> None:
        """At the end of backward: launch the remaining buckets, wait, and average."""
        self._armed = False
        buckets = self._buckets
        if not self._negotiate_grads:
            missing = missing_names(self._module)  # the launched buckets have them all
            if missing:
                raise missing_gradients_error(missing)
        for bucket in buckets[self._next :]:
            self._launch(bucket)
        self._next = len(buckets)
        works, self._works = self._works, []
        world_size = dist.get_world_size(self._group)
        for bucket, work in works:
            work.wait()
            bucket.unpack(world_size)

    def remove(self) -> None:
        """Unregister the gradient hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._layout = []


def missing_names(module: torch.nn.Module) -> list[str]:
    """Names of the parameters of ``module`` that require a gradient and have none."""
    return [
        name
        for name, param in module.named_parameters()
        if param.requires_grad and param.grad is None
    ]
