"""PreemptionHandler: a job told to stop saves where it is, stops cleanly, and resumes there.

The signal handler only records the signal. The extension, run at the end of every
iteration, turns it into a decision every rank takes at the same iteration: with several
ranks, each boundary starts a non-blocking all-reduce (MAX) of the signal this rank has seen,
on a gloo group of its own, and reads the one started at the previous boundary, so that the
iteration's critical path never waits for the other ranks. Once the ranks agree, every
snapshot extension of the manager that did not run at that iteration runs once, every rank
waits until they are committed, and the manager stops. Requeueing (``scontrol requeue``)
happens when the manager is finalized, after its writer has written everything.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, Extension
from pytorch_pfn_extras.training._snapshots._base import SnapshotExtension
from pytorch_pfn_extras.training._trigger_base import Trigger
from pytorch_pfn_extras.training._writer_util import finalize_writer

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._snapshots._comm import Comm

__all__ = ["PreemptionHandler"]

logger = logging.getLogger("pytorch_pfn_extras.training.extensions.preemption")

_SLURM_REQUEUE = ("scontrol", "requeue", "{job_id}")
_REQUEUE_TIMEOUT = 60.0  # seconds: scontrol answers in well under a second


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes for this Slurm job, or ``None`` outside Slurm.

    A task of a job array is ``<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>``; any other job
    is ``SLURM_JOB_ID``.
    """
    env = os.environ
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array_job and array_task:
        return f"{array_job}_{array_task}"
    return env.get("SLURM_JOB_ID") or None


class _EveryIteration(Trigger):
    """Fires after every iteration; tells runtimes the model state is needed only once a
    preemption is pending (the forced snapshots read it)."""

    def __init__(self, handler: PreemptionHandler) -> None:
        self._handler = handler

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        return True

    def may_fire(self, iteration: int, epoch_len: int) -> bool:
        return self._handler.pending


class _Agreement:
    """The ranks' agreement on an iteration at which to stop, once any of them had a signal.

    At some iteration boundaries (the same on every rank) :meth:`poll` reads the result of
    the exchange started at the previous such boundary, which had the time between them to
    complete, and starts the next one: a non-blocking all-reduce (MAX) of this rank's signal
    and of the number of iterations it proposes until the next exchange, so that exchanges
    happen about every ``period`` seconds (at least one iteration apart). Every rank reads
    the same result at the same boundary: the same decision, and the same next boundary.

    Args:
        comm: The ranks, with a gloo group of their own.
        period: Seconds between exchanges (0: after every iteration).
    """

    _MAX_INTERVAL = 10_000  # iterations between exchanges, whatever the iteration time

    def __init__(self, comm: Comm, period: float) -> None:
        import torch

        self._comm = comm
        self._period = period
        self._buffer = torch.zeros(2, dtype=torch.int64)  # [signal, proposed interval]
        self._view = self._buffer.numpy()  # reads and writes without a torch op
        self._work: Any = None
        self._countdown = 1  # boundaries until the next exchange
        self._interval = 1  # iterations between the last exchange and the next
        self._started_at = 0.0  # when the last exchange started (perf_counter)

    def poll(self, signum: int) -> int:
        """At an exchange boundary, start the next exchange with ``signum`` and return the
        previous one's agreed signal (0: none); once that is not 0, none is started."""
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
        self._view[0], self._view[1] = signum, proposal
        self._work = dist.all_reduce(
            self._buffer, op=dist.ReduceOp.MAX, group=self._comm.group, async_op=True
        )
        self._countdown = self._interval = interval
        self._started_at = now
        return 0

    def settle(self) -> None:
        """Wait for the exchange in flight (every rank started it), if any."""
        work, self._work = self._work, None
        if work is not None:
            work.wait(self._comm.timeout)

    def abandon(self) -> None:
        """Forget the exchange in flight (after an error, other ranks may never join it)."""
        self._work = None

    def barrier(self, action: str) -> None:
        self._comm.barrier(action)


class PreemptionHandler(Extension):
    """Save the training state and stop when the job is told to stop (preemption, time limit).

    Schedulers stop jobs from outside with a signal: Slurm sends ``--signal`` (e.g.
    ``sbatch --signal=B:USR1@90``) or SIGTERM before its SIGKILL, Kubernetes sends SIGTERM
    and kills after ``terminationGracePeriodSeconds``, torchrun forwards the SIGTERM it gets
    to its workers. With this extension the first of ``signals`` does nothing but set a flag
    (no I/O, no collective, nothing else runs in the signal handler). In a single process,
    the run stops at the end of the iteration in which the signal came. With several ranks
    (``torch.distributed``), the ranks exchange what they received about every
    ``check_interval`` seconds, whole iterations apart and at the same iterations on every
    rank, through a non-blocking all-reduce on a gloo group of their own that is started at
    one exchange and read at the next, so that no rank waits for the others on the
    iteration's path; they stop together at the iteration where the exchange that carries
    the signal is read, within about two ``check_interval`` (and one iteration) of it.

    There, every snapshot extension of the manager
    (:func:`~pytorch_pfn_extras.training.extensions.snapshot` and
    :func:`~pytorch_pfn_extras.training.extensions.snapshot_object`, every mode, also
    asynchronous ones) that did not run at that iteration runs once, whatever its trigger;
    every rank waits until they are committed; then the manager stops (``manager.stop_trigger``
    is true, the extensions are finalized) and a warning is logged saying where and why.
    The training loop ends normally and the process can exit 0; a later run resumes from
    the snapshot (``autoload=True``).

    A second signal of ``signals`` after the first restores the handler that was there
    before (the default action for most: the process ends), so the user or the scheduler
    can always kill the job. A forked child (a DataLoader worker) ignores the signals, as
    it inherits the handler. The handlers are installed when training starts (by the main
    thread only: elsewhere a warning says that signals are not caught) and the previous
    ones restored when the manager is finalized.

    With ``requeue=True`` under Slurm, rank 0 runs ``scontrol requeue <job>`` once the
    manager is finalized (its writer flushed): the requeued job starts again and
    autoloads. With several ranks, every rank must run this extension at the same
    iterations (it runs after each one by default).

    Args:
        signals: The signals that mean "stop": SIGTERM and SIGUSR1 by default.
        requeue: Requeue the job once the state is saved (rank 0 runs ``requeue_command``).
        requeue_command: The command that requeues: a sequence of arguments, formatted
            with ``job_id`` (the Slurm job, ``<array job>_<task>`` for a job array), or a
            callable ``fn(job_id)``; ``("scontrol", "requeue", "{job_id}")`` by default.
            Without Slurm (no ``SLURM_JOB_ID``) ``job_id`` is ``None`` and the default
            command is not run (a warning says so); a custom one still is.
        check_interval: With several ranks, the seconds between their exchanges (rounded
            to whole iterations, at least one; ``0``: after every iteration). An exchange
            costs a small all-reduce: 0.1 s keeps it within the noise of a training loop.

    Attributes:
        preempted: Whether the run stopped because of a signal.
        stop_iteration: The iteration at which it stopped (``None`` until then).
        received: The signal number this process received first (``None`` if none).
        requeued: Whether the requeue command ran and succeeded.

    Raises:
        ValueError: ``signals`` is empty or holds something that is not a signal that can
            be caught (SIGKILL and SIGSTOP cannot), or ``check_interval`` is negative.
        TypeError: ``requeue_command`` is neither a sequence of strings nor a callable, or
            ``check_interval`` is not a number.

    Example:
        >>> manager.extend(extensions.snapshot(autoload=True), trigger=(5000, "iteration"))
        >>> manager.extend(extensions.PreemptionHandler(requeue=True))
    """

    priority = PRIORITY_SNAPSHOT - 1  # after the snapshots of the iteration
    needs_model_state = True  # the forced snapshots read it (trigger.may_fire says when)

    def __init__(
        self,
        signals: Iterable[int] = (signal.SIGTERM, signal.SIGUSR1),
        *,
        requeue: bool = False,
        requeue_command: Sequence[str] | Callable[[str | None], Any] | None = None,
        check_interval: float = 0.1,
    ) -> None:
        self._signals = _check_signals(signals)
        if isinstance(check_interval, bool) or not isinstance(check_interval, (int, float)):
            message = f"check_interval must be a number of seconds, got {check_interval!r}"
            raise TypeError(message)
        if not check_interval >= 0:  # NaN too
            message = f"check_interval must be a number of seconds >= 0, got {check_interval!r}"
            raise ValueError(message)
        self._check_interval = float(check_interval)
        if not isinstance(requeue, bool):
            message = f"requeue must be a bool, got {requeue!r}"
            raise TypeError(message)
        self._requeue = requeue
        self._command = _check_command(requeue_command)
        self.trigger = _EveryIteration(self)
        self.preempted = False
        self.stop_iteration: int | None = None
        self.received: int | None = None
        self.requeued = False
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}
        self._agreement: _Agreement | None = None
        self._decided = 0  # the signal the ranks agreed on, once they have
        self._rank = 0
        self._failed = False

    @property
    def pending(self) -> bool:
        """Whether a signal was received here or agreed on, and the run has not stopped yet."""
        return (self.received is not None or self._decided != 0) and not self.preempted

    def notify(self, signum: int = signal.SIGTERM) -> None:
        """Act as if ``signum`` had been received (from a thread, a health check, a test).

        Only the flag is set: the run stops at the end of an iteration, as for a signal.
        """
        if self.received is None:
            self.received = int(signum)

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        if os.getpid() != self._pid:
            return  # a forked child (DataLoader worker): its parent handles the signal
        if self.received is None:
            self.received = signum
            return
        # The second signal: give the decision back to whoever handled it before.
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            message = (
                "PreemptionHandler: training does not run in the main thread, where Python "
                "handles signals; signals are not caught (call notify() to stop the run)"
            )
            logger.warning(message)
            return
        for signum in self._signals:
            previous = signal.signal(signum, self._on_signal)
            self._previous[signum] = signal.SIG_DFL if previous is None else previous

    def _restore(self) -> None:
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    # ------------------------------------------------------------------ extension

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Check the manager, set up the ranks' agreement and install the signal handlers."""
        if not callable(getattr(manager, "_request_stop", None)):
            message = (
                "PreemptionHandler needs a manager of pytorch_pfn_extras.training "
                f"(ExtensionsManager, IgniteExtensionsManager, a Trainer's), got {manager!r}"
            )
            raise TypeError(message)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from pytorch_pfn_extras.training._snapshots._comm import Comm

            if self._agreement is None:
                self._agreement = _Agreement(Comm(None, "PreemptionHandler"), self._check_interval)
            self._rank = dist.get_rank()
        if not _snapshots_of(manager):
            logger.warning(
                "PreemptionHandler: the manager has no snapshot extension; a preempted run "
                "stops without saving its state"
            )
        if self._requeue and self._command is None and slurm_job_id() is None:
            logger.warning(
                "PreemptionHandler(requeue=True): not running under Slurm (SLURM_JOB_ID is "
                "not set), so a preempted job is not requeued"
            )
        self._install()

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Stop the run here if the ranks agree that a signal came (or it came here, alone)."""
        if self.preempted:
            return
        agreement = self._agreement
        if agreement is None:
            if self.received is not None:
                self._preempt(manager, self.received)
            return
        decided = agreement.poll(self.received or 0)
        if decided:
            self._decided = decided
            self._preempt(manager, decided)

    def _preempt(self, manager: ExtensionsManagerProtocol, signum: int) -> None:
        iteration = manager.iteration
        snapshots = _snapshots_of(manager)
        for snapshot in snapshots:
            if snapshot.ran_at != iteration:
                snapshot(manager)
        for snapshot in snapshots:
            snapshot.wait_for_writes(manager)
        if self._agreement is not None:
            self._agreement.barrier("the end of the preemption snapshots")
        self.preempted = True
        self.stop_iteration = iteration
        where = "this process" if self._agreement is None else f"rank {self._rank}'s job"
        saved = f"after {len(snapshots)} snapshot(s)" if snapshots else "without a snapshot"
        reason = f"{_signal_name(signum)} was received by {where}"
        logger.warning("preempted: %s; training stops at iteration %d %s", reason, iteration, saved)
        manager._request_stop(f"preempted ({reason})")  # type: ignore[attr-defined]

    def on_error(
        self,
        manager: ExtensionsManagerProtocol,
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        """Forget the exchange in flight: after an error other ranks may never join it."""
        self._failed = True
        if self._agreement is not None:
            self._agreement.abandon()

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Restore the previous signal handlers; after a preemption with ``requeue``, flush
        the manager's writer and requeue the job (rank 0)."""
        try:
            if self._agreement is not None and not self._failed:
                self._agreement.settle()
            if self.preempted and self._requeue and self._rank == 0:
                writer = getattr(manager, "writer", None)
                if writer is not None:
                    finalize_writer(writer)  # everything written before the job is requeued
                self.requeued = self._run_requeue()
        finally:
            self._restore()

    def _run_requeue(self) -> bool:
        job_id = slurm_job_id()
        command = self._command
        if command is None:
            if job_id is None:
                return False  # the warning was given when training started
            command = _SLURM_REQUEUE
        if callable(command):
            command(job_id)
            return True
        argv = [part.format(job_id=job_id) for part in command]
        # Said before: Slurm may end this process as soon as the job is requeued.
        logger.warning("PreemptionHandler: requeueing the job with %s", argv)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=_REQUEUE_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            logger.error("PreemptionHandler: the requeue command %s failed: %s", argv, error)
            return False
        if done.returncode != 0:
            logger.error(
                "PreemptionHandler: the requeue command %s exited with %d: %s",
                argv,
                done.returncode,
                (done.stderr or done.stdout).strip(),
            )
            return False
        logger.info("PreemptionHandler: requeued the job with %s", argv)
        return True


def _snapshots_of(manager: ExtensionsManagerProtocol) -> list[SnapshotExtension]:
    return [
        entry.extension
        for _, entry in getattr(manager, "extensions", ())
        if isinstance(entry.extension, SnapshotExtension)
    ]


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _check_signals(signals: Iterable[int]) -> tuple[int, ...]:
    if isinstance(signals, int):
        signals = (signals,)
    try:
        chosen = tuple(signals)
    except TypeError:
        message = f"signals must be signal numbers (e.g. signal.SIGTERM), got {signals!r}"
        raise TypeError(message) from None
    if not chosen:
        message = "signals must name at least one signal (e.g. signal.SIGTERM)"
        raise ValueError(message)
    valid = signal.valid_signals()
    for signum in chosen:
        if isinstance(signum, bool) or not isinstance(signum, int) or signum not in valid:
            message = f"signals must be signal numbers (e.g. signal.SIGTERM), got {signum!r}"
            raise ValueError(message)
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            message = f"{_signal_name(signum)} cannot be caught; choose e.g. signal.SIGTERM"
            raise ValueError(message)
    return tuple(dict.fromkeys(int(s) for s in chosen))


def _check_command(
    command: Sequence[str] | Callable[[str | None], Any] | None,
) -> Sequence[str] | Callable[[str | None], Any] | None:
    if command is None or callable(command):
        return command
    if (
        isinstance(command, str)
        or not isinstance(command, Iterable)
        or not all(isinstance(part, str) for part in command)
    ):
        message = (
            "requeue_command must be a sequence of strings (arguments, formatted with "
            f"{{job_id}}) or a callable fn(job_id), got {command!r}"
        )
        raise TypeError(message)
    return tuple(command)
