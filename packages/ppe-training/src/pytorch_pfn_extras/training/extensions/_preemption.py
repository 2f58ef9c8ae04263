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
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, Extension
from pytorch_pfn_extras.training._snapshots._extension import SnapshotExtension
from pytorch_pfn_extras.training._trigger_base import Trigger
from pytorch_pfn_extras.training._writer_util import finalize_writer

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._snapshots._comm import Comm

__all__ = ["PreemptionHandler"]

logger = logging.getLogger("pytorch_pfn_extras.training.extensions.preemption")

_SLURM_REQUEUE = ("scontrol", "requeue", "{job_id}")
_REQUEUE_TIMEOUT = 60.0  # seconds: scontrol answers in well under a second


def slurm_job_id(environ: os._Environ[str] | dict[str, str] | None = None) -> str | None:
    """The id ``scontrol requeue`` takes for this Slurm job, or ``None`` outside Slurm.

    A task of a job array is ``<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>``; any other job
    is ``SLURM_JOB_ID``.
    """
    env = os.environ if environ is None else environ
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
    """The ranks' agreement on the first iteration at which any of them had a signal.

    Each :meth:`exchange` starts an all-reduce (MAX) of this rank's signal number and
    returns the result of the one the previous call started (0 at the first call), which
    had a whole iteration to complete: every rank gets the same answer at the same call.
    """

    def __init__(self, comm: Comm) -> None:
        import torch

        self._comm = comm
        self._flag = torch.zeros(1, dtype=torch.int64)
        self._view = self._flag.numpy()  # reads and writes without a torch op
        self._work: Any = None

    def exchange(self, signum: int) -> int:
        """Start the next exchange with ``signum`` and return the previous one's result;
        once that is not 0 (the ranks agree), none is started."""
        import torch.distributed as dist

        result = 0
        if self._work is not None:
            self._work.wait()
            result = int(self._view[0])
            if result:
                self._work = None  # decided: no further exchange
                return result
        self._view[0] = signum
        self._work = dist.all_reduce(
            self._flag, op=dist.ReduceOp.MAX, group=self._comm.group, async_op=True
        )
        return result

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
    (no I/O, no collective, nothing else runs in the signal handler). At the end of the
    iteration in which every rank knows of it (the same iteration on every rank, one or two
    after the signal with several ranks, the same one in a single process), every snapshot
    extension of the manager (:func:`~pytorch_pfn_extras.training.extensions.snapshot` and
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

    Attributes:
        preempted: Whether the run stopped because of a signal.
        stop_iteration: The iteration at which it stopped (``None`` until then).
        received: The signal number this process received first (``None`` if none).
        requeued: Whether the requeue command ran and succeeded.

    Raises:
        ValueError: ``signals`` is empty or holds something that is not a signal that can
            be caught (SIGKILL and SIGSTOP cannot).
        TypeError: ``requeue_command`` is neither a sequence of strings nor a callable.

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
    ) -> None:
        self._signals = _check_signals(signals)
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
                self._agreement = _Agreement(Comm(None, "PreemptionHandler"))
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
        decided = agreement.exchange(self.received or 0)
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
        logger.warning("PreemptionHandler: requeued the job with %s", argv)
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
