"""The ranks of a collective snapshot and the collectives between them."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def _default_timeout() -> datetime.timedelta:
    """The timeout of the default process group (``init_process_group(timeout=...)``)."""
    world = dist.group.WORLD
    for device in ("cpu", "cuda"):
        try:
            backend = world._get_backend(torch.device(device))  # type: ignore[union-attr]
            timeout = backend.options._timeout
        except Exception:  # torch keeps it private: fall back to torch's default
            continue
        if isinstance(timeout, datetime.timedelta):
            return timeout
    return dist.default_pg_timeout


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
        self.timeout = _default_timeout() if self.distributed else dist.default_pg_timeout
        self.group: Any = None
        self._session: str | None = None
        self._calls = 0
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

    def new_token(self) -> str:
        """A name part, the same on every rank and new at each call (every rank calls it
        equally often): a random part broadcast at the first call, then a count, so that
        the later calls need no collective."""
        if self._session is None:
            self._session = self.broadcast(uuid.uuid4().hex[:12])
        self._calls += 1
        return f"{self._session}{self._calls:04x}"

    def barrier(self, action: str) -> None:
        """Wait until every rank arrives; a rank missing after the timeout is named.

        Raises:
            RuntimeError: A rank did not arrive (it skipped the snapshot, or died).
        """
        if not self.collective:
            return
        try:
            dist.monitored_barrier(group=self.group, timeout=self.timeout, wait_all_ranks=True)
        except RuntimeError as error:
            message = (
                f"{self.what} on rank {self.rank}: not every rank of {self.world_size} reached "
                f"{action} within {self.timeout.total_seconds():g} s ({error}); every rank "
                "must run a collective snapshot at the same iterations (the same trigger "
                "and condition), and none may have died"
            )
            raise RuntimeError(message) from error
