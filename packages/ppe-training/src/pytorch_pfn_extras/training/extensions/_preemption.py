"""PreemptionHandler: a job told to stop saves where it is, stops cleanly, and resumes there.

The signal handler only records the signal (and counts repeats, which it absorbs:
``training/_preemption/_signals.py``). The extension, run at the end of every iteration, turns
it into a decision every rank takes at the same iteration (``_preemption/_agreement.py``):
with several ranks, each boundary starts a non-blocking all-reduce (MAX) of the signal this
rank has seen (and its rank), on a gloo group of its own, and reads the one started at the
previous boundary, so that the iteration's critical path never waits for the other ranks;
when training ends before they agreed, one blocking exchange settles it (``on_stop``). Once
the ranks agree, every snapshot extension of the manager that did not save at that iteration
saves once, every rank waits until they are committed, and the manager stops. Requeueing
(``_preemption/_requeue.py``) happens when the manager is finalized, after its writer has
written everything.
"""

from __future__ import annotations

import math
import signal
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, Extension
from pytorch_pfn_extras.training._preemption import logger
from pytorch_pfn_extras.training._preemption._agreement import Agreement, decode, key
from pytorch_pfn_extras.training._preemption._requeue import (
    check_command,
    run_requeue,
    slurm_job_id,
)
from pytorch_pfn_extras.training._preemption._signals import Signals, check_signals, signal_name
from pytorch_pfn_extras.training._snapshots._base import SnapshotExtension
from pytorch_pfn_extras.training._trigger_base import Trigger
from pytorch_pfn_extras.training._writer_util import finalize_writer

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

__all__ = ["PreemptionHandler"]


class _EveryIteration(Trigger):
    """Fires after every iteration; tells runtimes the model state is needed only once a
    preemption is pending (the forced snapshots read it)."""

    def __init__(self, handler: PreemptionHandler) -> None:
        self._handler = handler

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        return True

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        return self._handler.pending


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
    the signal is read, within about two ``check_interval`` (and one iteration) of it. When
    training ends first (a signal in the last iterations), the ranks exchange once more,
    blocking, and a signal any of them had is acted on there.

    There, every snapshot extension of the manager
    (:func:`~pytorch_pfn_extras.training.extensions.snapshot` and
    :func:`~pytorch_pfn_extras.training.extensions.snapshot_object`, every mode, also
    asynchronous ones) that did not save at that iteration saves once, whatever its trigger
    and its ``condition``; every rank waits until they are committed; then the manager
    stops (``manager.request_stop(..., preempted=True)``: ``manager.stop_trigger`` is true,
    the extensions are finalized) and a warning is logged on every rank saying where, why,
    which rank received the signal and how many snapshots were saved. The training loop
    ends normally (a further ``run_iteration()`` exits the process with ``SystemExit(0)``)
    and a later run resumes from the snapshot (``autoload=True``).

    Repeats are absorbed: a signal of ``signals`` after the first one (Slurm signals every
    process of a job step and torchrun forwards its own copy, so each worker gets two) does
    nothing but count, and one log line says how many were ignored. Two policies give a
    repeat to the handler that was there before (the default action for most: the process
    ends): a second SIGINT (a person pressing Ctrl-C twice; only if SIGINT is one of
    ``signals``), and, with ``escalate_after``, any repeat that comes that many seconds or
    more after the first signal. A forked child (a DataLoader worker) ignores the signals,
    as it inherits the handler. The handlers are installed when training starts (by the
    main thread only: elsewhere a warning says that signals are not caught). When the
    manager is finalized, the previous ones are restored, unless the run was preempted or
    received a signal: then they stay installed, absorbing the repeats, until the process
    exits (a repeat during the interpreter's exit is ignored).

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
        escalate_after: Seconds after the first signal from which a repeat is given to the
            previous handler (``0``: every repeat; ``None``: none, the default).

    Attributes:
        preempted: Whether the run stopped because of a signal.
        stop_iteration: The iteration at which it stopped (``None`` until then).
        received: The signal number this process received first (``None`` if none).
        requeued: Whether the requeue command ran and succeeded.

    Raises:
        ValueError: ``signals`` is empty or holds something that is not a signal that can
            be caught (SIGKILL and SIGSTOP cannot); ``check_interval`` or
            ``escalate_after`` is negative, NaN or infinite.
        TypeError: ``requeue_command`` is neither a sequence of strings nor a callable;
            ``check_interval`` or ``escalate_after`` is not a number.

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
        escalate_after: float | None = None,
    ) -> None:
        chosen = check_signals(signals)
        self._check_interval = _check_seconds("check_interval", check_interval)
        if escalate_after is not None:
            escalate_after = _check_seconds("escalate_after", escalate_after)
        if not isinstance(requeue, bool):
            message = f"requeue must be a bool, got {requeue!r}"
            raise TypeError(message)
        self._requeue = requeue
        self._command = check_command(requeue_command)
        self._signals = Signals(chosen, escalate_after)
        self.trigger = _EveryIteration(self)
        self.preempted = False
        self.stop_iteration: int | None = None
        self.requeued = False
        self._agreement: Agreement | None = None
        self._decided = 0  # the key the ranks agreed on, once they have
        self._rank = 0
        self._failed = False
        self._repeats_logged = False

    @property
    def received(self) -> int | None:
        """The signal number this process received first (``None`` if none)."""
        return self._signals.received

    @property
    def pending(self) -> bool:
        """Whether a signal was received here or agreed on, and the run has not stopped yet."""
        return (self.received is not None or self._decided != 0) and not self.preempted

    def notify(self, signum: int = signal.SIGTERM) -> None:
        """Act as if ``signum`` had been received (from a thread, a health check, a test).

        Only the flag is set: the run stops at the end of an iteration, as for a signal.
        """
        self._signals.notify(signum)

    def _log_repeats(self) -> None:
        caught = self._signals
        if caught.repeats and not self._repeats_logged:
            self._repeats_logged = True
            logger.info(
                "PreemptionHandler: ignored %d repeated signal(s) (the last: %s) after the "
                "first (%s): the run already stops for it (escalate_after=%s)",
                caught.repeats,
                signal_name(caught.last_repeat or 0),
                signal_name(caught.received or 0),
                caught.escalate_after,
            )

    # ------------------------------------------------------------------ extension

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Check the manager, set up the ranks' agreement and install the signal handlers."""
        if not callable(getattr(manager, "request_stop", None)):
            message = (
                "PreemptionHandler needs a manager with request_stop(reason, preempted=) "
                "(ExtensionsManager, IgniteExtensionsManager, a Trainer's), got "
                f"{manager!r}"
            )
            raise TypeError(message)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from pytorch_pfn_extras.training._snapshots._comm import Comm

            if self._agreement is None:
                self._agreement = Agreement(Comm(None, "PreemptionHandler"), self._check_interval)
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
        self._signals.install()

    def _own_key(self) -> int:
        agreement = self._agreement
        if self.received is None or agreement is None:
            return 0
        return key(self.received, agreement.rank, agreement.world_size)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Stop the run here if the ranks agree that a signal came (or it came here, alone)."""
        self._log_repeats()
        if self.preempted:
            return
        agreement = self._agreement
        if agreement is None:
            if self.received is not None:
                self._preempt(manager, self.received, 0)
            return
        decided = agreement.poll(self._own_key())
        if decided:
            self._decided = decided
            self._preempt(manager, *decode(decided, agreement.world_size))

    def on_stop(self, manager: ExtensionsManagerProtocol) -> None:
        """Training ends (the stop trigger fired before the ranks agreed on a signal, or
        the manager was finalized): exchange once more, blocking; if any rank had a
        signal, save and stop here as at any preemption."""
        self._log_repeats()
        if self.preempted or self._failed:
            return
        agreement = self._agreement
        if agreement is None:
            if self.received is not None:
                self._preempt(manager, self.received, 0)
            return
        decided = agreement.final(self._own_key())
        if decided:
            self._decided = decided
            self._preempt(manager, *decode(decided, agreement.world_size))

    def _preempt(self, manager: ExtensionsManagerProtocol, signum: int, rank: int) -> None:
        iteration = manager.iteration
        saved, failed = self._save_all(manager, iteration)
        self.preempted = True
        self.stop_iteration = iteration
        where = "this process" if self._agreement is None else f"rank {rank}"
        reason = f"{signal_name(signum)} was received by {where}"
        outcome = f"after {saved} snapshot(s)" if saved else "without a snapshot"
        if failed:
            names = ", ".join(f"{name!r} ({error!r})" for name, error in failed.items())
            outcome += f"; {len(failed)} failed: {names}"
        logger.warning(
            "preempted: %s; training stops at iteration %d %s", reason, iteration, outcome
        )
        manager.request_stop(f"preempted ({reason})", preempted=True)
        if failed:
            raise next(iter(failed.values()))

    def _save_all(
        self, manager: ExtensionsManagerProtocol, iteration: int
    ) -> tuple[int, dict[str, Exception]]:
        """Save every snapshot extension that did not save at ``iteration`` and wait until
        all are committed, on every rank; return how many saved there, and the failures by
        extension name (one failing does not keep the others from saving)."""
        snapshots = _snapshots_of(manager)
        failed: dict[str, Exception] = {}
        for name, snapshot in snapshots:
            if snapshot.saved_at != iteration:
                try:
                    snapshot.save(manager)
                except Exception as error:
                    failed[name] = error
        for name, snapshot in snapshots:
            try:
                snapshot.wait_for_writes(manager)
            except Exception as error:
                failed.setdefault(name, error)
        if self._agreement is not None:
            self._agreement.barrier("the end of the preemption snapshots")
        saved = sum(
            1
            for name, snapshot in snapshots
            if snapshot.saved_at == iteration and name not in failed
        )
        return saved, failed

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
        """After a preemption with ``requeue``, flush the manager's writer and requeue the
        job (rank 0); restore the previous signal handlers unless the run was preempted or
        received a signal (then they stay until the process exits)."""
        try:
            if self._agreement is not None and not self._failed:
                self._agreement.settle()
            if self.preempted and self._requeue and self._rank == 0:
                writer = getattr(manager, "writer", None)
                if writer is not None:
                    finalize_writer(writer)  # everything written before the job is requeued
                self.requeued = run_requeue(self._command)
        finally:
            self._log_repeats()
            if self.preempted or self.received is not None:
                self._signals.keep_until_exit()
            else:
                self._signals.restore()


def _snapshots_of(manager: ExtensionsManagerProtocol) -> list[tuple[str, SnapshotExtension]]:
    return [
        (name, entry.extension)
        for name, entry in getattr(manager, "extensions", ())
        if isinstance(entry.extension, SnapshotExtension)
    ]


def _check_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        message = f"{name} must be a number of seconds, got {value!r}"
        raise TypeError(message)
    if not 0 <= value < math.inf:  # NaN too
        message = f"{name} must be a number of seconds >= 0 and finite, got {value!r}"
        raise ValueError(message)
    return float(value)
