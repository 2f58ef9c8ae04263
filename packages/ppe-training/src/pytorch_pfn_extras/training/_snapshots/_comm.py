"""The ranks of a collective snapshot and the collectives between them."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import torch.distributed as dist

from pytorch_pfn_extras.training._snapshots._torch_api import default_timeout

T = TypeVar("T")


class Comm:
    """The ranks that write a collective snapshot together.

    Without ``torch.distributed`` (or with a single rank) it is one process. With several
    ranks, the snapshot's collectives run on a gloo group of their own (created by every
    rank, with the default group's timeout), so that an asynchronous save never interleaves
    with the training's collectives and a rank that does not take part is detected by a
    monitored barrier, which names it.

    Args:
        saver_rank: The coordinator (it writes the training state and commits); ``0`` when
            ``None``.
        what: How error messages name the snapshot extension.
    """

    def __init__(self, saver_rank: int | None, what: str) -> None:
        self.what = what
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        coordinator = 0 if saver_rank is None else saver_rank
        if coordinator >= self.world_size:
            message = (
                f"snapshot saver_rank={coordinator} is not a rank of the process group of "
                f"size {self.world_size}"
            )
            raise ValueError(message)
        self.coordinator = coordinator
        self.timeout = default_timeout() if self.distributed else dist.default_pg_timeout
        self.group: Any = None
        if self.distributed and self.world_size > 1:
            self.group = dist.new_group(backend="gloo", timeout=self.timeout)

    @property
    def is_coordinator(self) -> bool:
        """Whether this rank writes the training state, the manifest and commits."""
        return self.rank == self.coordinator

    @property
    def collective(self) -> bool:
        """Whether other ranks take part (``False`` for a single process)."""
        return self.group is not None

    def broadcast(self, obj: T) -> T:
        """The coordinator's ``obj`` on every rank."""
        if not self.collective:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=self.coordinator, group=self.group)
        return holder[0]

    def all_gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, by rank."""
        if not self.collective:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj, group=self.group)
        return gathered

    def barrier(self, action: str) -> None:
        """Wait until every rank arrives; a rank missing after the timeout is named.

        Raises:
            RuntimeError: A rank did not arrive (it skipped the snapshot, or died).
        """
        if not self.collective:
            return
        started = time.monotonic()
        try:
            dist.monitored_barrier(group=self.group, timeout=self.timeout, wait_all_ranks=True)
        except RuntimeError as error:
            waited, timeout = time.monotonic() - started, self.timeout.total_seconds()
            if waited >= timeout:
                when = f"within {timeout:g} s"
            else:  # a rank died or left: the barrier failed without waiting it out
                when = (
                    f"(the barrier failed after {waited:.1f} s, before its {timeout:g} s timeout)"
                )
            message = (
                f"{self.what} on rank {self.rank}: not every rank of {self.world_size} reached "
                f"{action} {when} ({error}); every rank must run a collective snapshot at "
                "the same iterations (the same trigger and condition), and none may have died"
            )
            raise RuntimeError(message) from error
