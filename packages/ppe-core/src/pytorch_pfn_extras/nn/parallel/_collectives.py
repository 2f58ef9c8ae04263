"""Default broadcast of DistributedDataParallel, on coalesced buffers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# Tensors are packed into flat buffers of at most this many bytes per collective call:
# few calls for many small tensors, bounded extra memory for large ones.
_BUCKET_BYTES = 32 * 1024 * 1024


def _buckets(tensors: Sequence[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for group in groups.values():
        bucket: list[torch.Tensor] = []
        size = 0
        for tensor in group:
            nbytes = tensor.numel() * tensor.element_size()
            if bucket and size + nbytes > _BUCKET_BYTES:
                yield bucket
                bucket, size = [], 0
            bucket.append(tensor)
            size += nbytes
        if bucket:
            yield bucket


@torch.no_grad()
def _coalesced(tensors: Sequence[torch.Tensor], op: Callable[[torch.Tensor], None]) -> None:
    """Apply the in-place collective ``op`` to ``tensors`` through flat buffers."""
    for bucket in _buckets([tensor.detach() for tensor in tensors]):
        if len(bucket) == 1 and bucket[0].is_contiguous():
            op(bucket[0])
            continue
        flat = torch.cat([tensor.reshape(-1) for tensor in bucket])
        op(flat)
        offset = 0
        for tensor in bucket:
            numel = tensor.numel()
            tensor.copy_(flat[offset : offset + numel].view_as(tensor))
            offset += numel


def _check_dense(tensors: Sequence[torch.Tensor], what: str) -> None:
    for tensor in tensors:
        if tensor.layout != torch.strided:
            message = (
                f"the default {what} of DistributedDataParallel handles dense tensors only, "
                f"got a {tensor.layout} tensor of shape {tuple(tensor.shape)}; "
                f"pass your own {what.replace(' ', '_')}"
            )
            raise ValueError(message)


def broadcast_from_first(tensors: Sequence[torch.Tensor], group: ProcessGroup | None) -> None:
    """Overwrite every tensor with its value on the first rank of ``group``."""
    _check_dense(tensors, "broadcast function")
    src = 0 if group is None else dist.get_global_rank(group, 0)

    def broadcast(flat: torch.Tensor) -> None:
        dist.broadcast(flat, src=src, group=group)

    _coalesced(tensors, broadcast)
