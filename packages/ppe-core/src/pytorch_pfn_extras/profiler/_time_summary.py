"""Wall-clock (and CUDA) timings of tagged code sections, summarized as mean/std/min/max.

Reports made in child processes (forked, or given a pickled copy) go back to the process that
created the TimeSummary through a :class:`~._spool.Spool`, read by ``synchronize()``.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from pytorch_pfn_extras.profiler._spool import Spool
from pytorch_pfn_extras.reporting import DictSummary

_CudaItem = tuple[str, "torch.cuda.Event", "torch.cuda.Event"]


class _SummaryResult(tuple[DictSummary, dict[str, float]]):
    """``(DictSummary, {"<tag>.min"/"<tag>.max": seconds})``; also usable with ``with``."""

    __slots__ = ()

    def __enter__(self) -> _SummaryResult:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class _ReportNotification:
    """Context manager of one :meth:`TimeSummary.report`; ``defer()`` postpones completion."""

    __slots__ = (
        "_begin",
        "_begin_event",
        "_completed",
        "_deferred",
        "_device",
        "_summary",
        "_tag",
        "_use_cuda",
    )

    def __init__(
        self, summary: TimeSummary, tag: str, use_cuda: bool, device: torch.device | None
    ) -> None:
        self._summary = summary
        self._tag = tag
        self._use_cuda = use_cuda
        self._device = device
        self._begin_event: torch.cuda.Event | None = None
        if use_cuda:
            summary._ensure_cuda_worker()
            self._begin_event = _recorded_event(device)
        self._begin = 0.0
        self._deferred = False
        self._completed = False

    def __enter__(self) -> _ReportNotification:
        self._begin = self._summary.clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._deferred:
            self.complete()

    def defer(self) -> None:
        """Do not record when the block exits; :meth:`complete` records later (async work)."""
        self._deferred = True

    def complete(self) -> None:
        """Record the time elapsed since the block was entered.

        Raises:
            RuntimeError: the report was already completed.
        """
        if self._completed:
            message = f"the report of {self._tag!r} was already completed"
            raise RuntimeError(message)
        self._completed = True
        summary = self._summary
        if self._device is None:
            summary.complete_report(self._tag, self._use_cuda, self._begin_event, self._begin)
            return
        with torch.cuda.device(self._device):  # the end event goes to the begin event's device
            summary.complete_report(self._tag, self._use_cuda, self._begin_event, self._begin)


def _recorded_event(device: torch.device | None) -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    event.record(torch.cuda.current_stream(device))
    return event


class TimeSummary:
    """Online summarization of execution times of tagged code sections.

    :meth:`report` measures the wall time of a block (in seconds) under its tag; with
    ``use_cuda=True`` it also records CUDA events around the block, and a worker thread adds the
    GPU time as ``"<tag>.cuda"`` once the events complete, so the training loop never waits for
    the device.

    A TimeSummary may be given to child processes (``multiprocessing``, DataLoader workers),
    forked or spawned: what they report is added to the summary of the process that created
    it when that process calls :meth:`synchronize` (or :meth:`summary`). A forked child's
    :func:`get_time_summary` is the parent's, so its :func:`record` sections come back too.

    Args:
        max_queue_size: At most this many CUDA timings wait for the worker thread; reporting
            blocks while the queue is full.
        auto_init: Start the worker thread on the first ``use_cuda=True`` report; otherwise
            :meth:`initialize` must be called first.

    Attributes:
        clock: The function that reads the time, in seconds (``time.perf_counter``); assign
            another one to an instance to measure with another clock.

    Example:
        >>> ts = TimeSummary()
        >>> with ts.report("forward"):
        ...     y = model(x)
        >>> summary, extrema = ts.summary(clear=True)
        >>> summary.compute_mean()["forward"], extrema["forward.max"]  # seconds
    """

    def __init__(self, *, max_queue_size: int = 1000, auto_init: bool = True) -> None:
        if type(max_queue_size) is not int or max_queue_size < 1:
            message = f"max_queue_size must be a positive int, got {max_queue_size!r}"
            raise ValueError(message)
        self._max_queue_size = max_queue_size
        self._auto_init = auto_init
        self._spool = Spool("ppe-time-summary")
        self._setup_local_state()

    def _setup_local_state(self) -> None:
        self.clock: Callable[[], float] = time.perf_counter
        self._lock = threading.Lock()
        self._summary = DictSummary()
        self._min: dict[str, float] = {}
        self._max: dict[str, float] = {}
        self._queue: queue.Queue[_CudaItem | None] | None = None
        self._worker: threading.Thread | None = None
        self._worker_error: BaseException | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process reports to this one; it starts with nothing of its own.
        return {
            "max_queue_size": self._max_queue_size,
            "auto_init": self._auto_init,
            "spool": self._spool,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._max_queue_size = state["max_queue_size"]
        self._auto_init = state["auto_init"]
        self._spool = state["spool"]
        self._setup_local_state()

    def initialize(self) -> None:
        """Start the worker thread that turns CUDA events into timings (idempotent)."""
        with self._lock:
            if self._worker is not None and self._worker.is_alive():
                return
            if self._queue is None:
                self._queue = queue.Queue(self._max_queue_size)
            self._worker = threading.Thread(
                target=_process_cuda_events,
                args=(self._queue, weakref.ref(self)),
                name="ppe-time-summary",
                daemon=True,
            )
            self._worker.start()
            weakref.finalize(self, _stop_worker, self._queue)

    def finalize(self) -> None:
        """Process the pending timings and stop the worker thread."""
        worker, q = self._worker, self._queue
        if worker is not None and q is not None:
            q.put(None)
            worker.join()
            self._worker = None
        self.synchronize()

    def synchronize(self) -> None:
        """Wait until every pending CUDA timing has been added to the summary, and add what
        child processes have reported so far.

        Raises:
            RuntimeError: the worker thread failed to read CUDA events.
        """
        if self._queue is not None and self._worker is not None:
            self._queue.join()
        received = self._spool.collect()
        if received:
            with self._lock:
                for name, value in received:
                    self._add_locked(name, float(value))
        error, self._worker_error = self._worker_error, None
        if error is not None:
            message = f"TimeSummary could not read CUDA events: {error!r}"
            raise RuntimeError(message) from error

    def _ensure_cuda_worker(self) -> None:
        if self._worker is not None:
            return
        if not torch.cuda.is_available():
            message = "TimeSummary.report(use_cuda=True) needs CUDA, but torch.cuda.is_available() is False"
            raise RuntimeError(message)
        if not self._auto_init:
            message = "TimeSummary(auto_init=False) needs initialize() before report(use_cuda=True)"
            raise RuntimeError(message)
        self.initialize()

    def add(self, name: str, value: Any) -> None:
        """Add a value (e.g. a time measured elsewhere, in seconds) under ``name``."""
        value = float(value)
        if not self._spool.is_owner():
            self._spool.send((name, value))
            return
        with self._lock:
            self._add_locked(name, value)

    def _add_locked(self, name: str, value: float) -> None:
        self._summary._add_float(name, value)
        low = self._min.get(name)
        if low is None or value < low:
            self._min[name] = value
        high = self._max.get(name)
        if high is None or value > high:
            self._max[name] = value

    def complete_report(
        self, tag: str, use_cuda: bool, begin_event: torch.cuda.Event | None, begin: float
    ) -> None:
        """Record a section that began at ``begin`` and ends now.

        The context manager of :meth:`report` calls it when its block exits (or when a deferred
        report is completed); a subclass may override it to see every report.

        Args:
            tag: Name of the section.
            use_cuda: Also time the section on the current CUDA stream, from ``begin_event``
                to now, as ``"<tag>.cuda"``.
            begin_event: The CUDA event recorded when the section began (``None`` without
                ``use_cuda``).
            begin: The :attr:`clock` when the section began.

        Raises:
            ValueError: ``use_cuda`` is True and ``begin_event`` is None.
        """
        self.add(tag, self.clock() - begin)
        if not use_cuda:
            return
        if begin_event is None:
            message = f"complete_report({tag!r}, use_cuda=True) needs the begin_event"
            raise ValueError(message)
        self._ensure_cuda_worker()
        assert self._queue is not None
        self._queue.put((tag + ".cuda", begin_event, _recorded_event(None)))

    def report(self, tag: str, use_cuda: bool = False) -> _ReportNotification:
        """Context manager that records the execution time of its block under ``tag``.

        Args:
            tag: Name of the code section.
            use_cuda: Also record the GPU time of the section as ``"<tag>.cuda"``.

        Returns:
            A context manager; its value has ``defer()``, to leave the block without recording,
            and ``complete()``, to record later (e.g. when asynchronous work ends).

        Raises:
            RuntimeError: ``use_cuda`` is True but CUDA is unavailable, or the worker thread is
                not started and ``auto_init`` is False.

        Example:
            >>> with time_summary.report("data", use_cuda=True):
            ...     batch = next(it)
        """
        return _ReportNotification(self, tag, use_cuda, None)

    def summary(self, clear: bool = False) -> _SummaryResult:
        """Return the timings: ``(DictSummary of seconds, {"<tag>.min"/"<tag>.max": seconds})``.

        Waits for the pending timings first (see :meth:`synchronize`). The result can also be
        used as ``with ts.summary(clear=True) as (summary, extrema):``.

        Args:
            clear: Start over with an empty summary afterwards.
        """
        self.synchronize()
        with self._lock:
            summary = self._summary + DictSummary()
            extrema = {f"{tag}.min": value for tag, value in self._min.items()}
            extrema.update({f"{tag}.max": value for tag, value in self._max.items()})
            if clear:
                self._summary = DictSummary()
                self._min = {}
                self._max = {}
        return _SummaryResult((summary, extrema))


def _stop_worker(q: queue.Queue[_CudaItem | None]) -> None:
    try:
        q.put_nowait(None)
    except queue.Full:  # the worker drains it, then waits forever (a daemon thread)
        pass


def _process_cuda_events(q: queue.Queue[_CudaItem | None], ref: weakref.ref[TimeSummary]) -> None:
    while True:
        item = q.get()
        try:
            if item is None:
                return
            name, begin, end = item
            end.synchronize()
            seconds = begin.elapsed_time(end) / 1000.0
            summary = ref()
            if summary is not None:
                summary.add(name, seconds)
        except Exception as error:  # reported by synchronize()/finalize()
            summary = ref()
            if summary is not None and summary._worker_error is None:
                summary._worker_error = error
        finally:
            q.task_done()


class _Local(threading.local):
    def __init__(self) -> None:
        self.time_summary: TimeSummary | None = None


_local = _Local()


def get_time_summary() -> TimeSummary:
    """Return this thread's :class:`TimeSummary`, the one :func:`record` reports to."""
    summary = _local.time_summary
    if summary is None:
        summary = _local.time_summary = TimeSummary()
    return summary
