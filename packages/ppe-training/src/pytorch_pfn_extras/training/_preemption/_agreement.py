"""The ranks' agreement on an iteration at which to stop, once any of them had a signal."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._snapshots._comm import Comm


def key(signum: int, rank: int, world_size: int) -> int:
    """What a rank that received ``signum`` puts into the exchange: the MAX of the ranks'
    keys is the key of the lowest rank that received a signal (0: none did)."""
    return (world_size - rank) << 8 | signum  # signal numbers are below 256


def decode(agreed: int, world_size: int) -> tuple[int, int]:
    """``(signal, rank)`` of an agreed key."""
    return agreed & 0xFF, world_size - (agreed >> 8)


class Agreement:
    """The ranks' agreement on an iteration at which to stop.

    At some iteration boundaries (the same on every rank) :meth:`poll` reads the result of
    the exchange started at the previous such boundary, which had the time between them to
    complete, and starts the next one: a non-blocking all-reduce (MAX) of this rank's key
    (:func:`key`: the signal and who received it) and of the number of iterations it
    proposes until the next exchange, so that exchanges happen about every ``period``
    seconds (at least one iteration apart). Every rank reads the same result at the same
    boundary: the same decision, and the same next boundary. When training ends,
    :meth:`final` exchanges once more, blocking, so that a signal that came too late for
    the last boundary is not lost.

    Args:
        comm: The ranks, with a gloo group of their own.
        period: Seconds between exchanges (0: after every iteration).
    """

    _MAX_INTERVAL = 10_000  # iterations between exchanges, whatever the iteration time

    def __init__(self, comm: Comm, period: float) -> None:
        import torch

        self._comm = comm
        self._period = period
        self._buffer = torch.zeros(2, dtype=torch.int64)  # [key, proposed interval]
        self._view = self._buffer.numpy()  # reads and writes without a torch op
        self._work: Any = None
        self._countdown = 1  # boundaries until the next exchange
        self._interval = 1  # iterations between the last exchange and the next
        self._started_at = 0.0  # when the last exchange started (perf_counter)

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._comm.rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._comm.world_size

    def poll(self, own: int) -> int:
        """At an exchange boundary, start the next exchange with this rank's key ``own`` and
        return the previous one's agreed key (0: no signal); once that is not 0, none is
        started."""
        self._countdown -= 1
        if self._countdown > 0:
            return 0
        import torch.distributed as dist

        now = time.perf_counter()
        interval = 1
        if self._work is not None:
            self._work.wait()
            agreed, interval = int(self._view[0]), int(self._view[1])
            if agreed:
                self._work = None  # decided: no further exchange
                return agreed
        proposal = 1
        if self._period > 0 and self._started_at:
            per_iteration = max((now - self._started_at) / self._interval, 1e-9)
            proposal = min(max(int(self._period / per_iteration), 1), self._MAX_INTERVAL)
        self._view[0], self._view[1] = own, proposal
        self._work = dist.all_reduce(
            self._buffer, op=dist.ReduceOp.MAX, group=self._comm.group, async_op=True
        )
        self._countdown = self._interval = interval
        self._started_at = now
        return 0

    def final(self, own: int) -> int:
        """Wait for the exchange in flight, then exchange ``own`` once more and wait for it;
        return the agreed key (0: no rank had a signal). Every rank calls it when training
        ends."""
        import torch.distributed as dist

        self.settle()  # what it carried, the keys of now carry too: a key is never reset
        self._view[0], self._view[1] = own, 0
        dist.all_reduce(self._buffer, op=dist.ReduceOp.MAX, group=self._comm.group)
        return int(self._view[0])

    def settle(self) -> None:
        """Wait for the exchange in flight (every rank started it), if any."""
        work, self._work = self._work, None
        if work is not None:
            work.wait(self._comm.timeout)

    def abandon(self) -> None:
        """Forget the exchange in flight (after an error, other ranks may never join it)."""
        self._work = None

    def barrier(self, action: str) -> None:
        """Wait until every rank arrives (:meth:`Comm.barrier`)."""
        self._comm.barrier(action)
