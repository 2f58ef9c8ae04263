"""``QueueWriter`` and ``ThreadQueueWriter``: one consumer, a bounded queue of writes."""

from __future__ import annotations

import atexit
import functools
import queue
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from pytorch_pfn_extras.interop._checks import is_int
from pytorch_pfn_extras.writing._errors import Failures, add_note
from pytorch_pfn_extras.writing._mp import fork_guard
from pytorch_pfn_extras.writing._simple_writer import SimpleWriter
from pytorch_pfn_extras.writing._snapshot import snapshot
from pytorch_pfn_extras.writing._writer_base import (
    SaveFun,
    Writer,
    check_savefun,
    resolve_savefun,
)

__all__ = ["DEFAULT_MAX_PENDING", "QueueWriter", "Task", "ThreadQueueWriter"]

Task = Callable[..., Any]

DEFAULT_MAX_PENDING = 2
"""Default bound on the writes a queue writer holds (queued or being written)."""

POLL_SECONDS = 0.1
"""How often a caller blocked on a full queue checks that the consumer is still alive."""

_live: weakref.WeakSet[QueueWriter] = weakref.WeakSet()
_atexit_registered: list[bool] = []


def _drain_at_exit() -> None:
    # Consumers wait on their queue forever: drain them before the interpreter
    # (and multiprocessing's own exit handler) stops them, so no write is lost.
    for writer in list(_live):
        try:
            writer.finalize()
        except BaseException:
            traceback.print_exc()


def _track(writer: QueueWriter) -> None:
    if not _atexit_registered:
        atexit.register(_drain_at_exit)
        _atexit_registered.append(True)
    _live.add(writer)


def is_alive(consumer: Any) -> bool:
    """Whether a consumer (thread, process, or a user's object) is still running."""
    alive = getattr(consumer, "is_alive", None)
    return True if alive is None else bool(alive())


def task_done(q: Any) -> None:
    """``q.task_done()`` for the queues that count finished items (``queue.Queue``...)."""
    done = getattr(q, "task_done", None)
    if done is not None:
        done()


class Write(NamedTuple):
    """A queued write, laid out as PPE's queue items (a 6-tuple, in this order).

    The consumer calls :meth:`perform`; ``task`` records the outcome
    and frees the write's slot.
    """

    task: Task
    filename: str
    out_dir: str
    target: Any
    savefun: SaveFun | None
    append: bool

    def perform(self) -> None:
        """Call ``task(filename, out_dir, target, savefun=savefun, append=append)``."""
        self.task(
            self.filename, self.out_dir, self.target, savefun=self.savefun, append=self.append
        )


def _check_max_pending(value: Any, owner: str) -> int:
    if not is_int(value):
        message = f"{owner}: max_pending must be an int >= 1, got {value!r}"
        raise TypeError(message)
    if value < 1:
        message = f"{owner}: max_pending must be >= 1 (writes held at once), got {value}"
        raise ValueError(message)
    return value


class QueueWriter(Writer):
    """Base of the writers whose single consumer takes writes from a queue.

    A call copies the target (every tensor to CPU, storages shared as in the
    original) and puts the write on a queue; it returns at once, unless
    ``max_pending`` writes are already queued or being written: it then blocks
    until the oldest one is done. So a queue writer holds at most
    ``max_pending`` copies of the state, however slow the disk, and a killed
    process loses at most ``max_pending`` writes.

    The first call creates the queue (:meth:`create_queue`) and the consumer
    (:meth:`create_consumer`), and starts the consumer, which runs
    :meth:`consume`: for each write, in order, ``task(filename, out_dir,
    target, savefun=savefun, append=append)``. :meth:`finalize` drains the
    queue, stops the consumer and raises the first failed write, if any (a
    failure is also raised by the next call). Pending writes are drained at
    interpreter exit if :meth:`finalize` was not called. Subclasses implement
    :meth:`create_queue` and :meth:`create_consumer`; ``QueueWriter`` itself
    can be constructed, and they raise :class:`NotImplementedError` when its
    first write needs them.

    Args:
        savefun: ``savefun(target, fileobj, **kwds)`` of the default task;
            ``torch.save`` by default (also when ``None``).
        fs: Filesystem of the default task; the local filesystem by default.
        out_dir: Default output directory.
        task: Callable doing one write, with a writer's call signature; the
            result of :meth:`create_task` (a :class:`SimpleWriter`) by default.
        max_pending: Most writes held at once, queued or being written
            (``>= 1``); a call blocks while that many are pending.
        **kwds: Keyword arguments passed to every ``savefun`` call of the
            default task.
    """

    def __init__(
        self,
        savefun: SaveFun | None = torch.save,
        fs: Any = None,
        out_dir: str = "",
        task: Task | None = None,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        owner = type(self).__name__
        self._savefun = resolve_savefun(savefun, owner)
        self._kwds = kwds
        self._max_pending = _check_max_pending(max_pending, owner)
        if task is None:
            task = self.create_task(self._savefun)
        elif not callable(task):
            message = f"{owner}: task must be callable like a writer, got {task!r}"
            raise TypeError(message)
        self._task: Task = task
        self._queue: Any = None
        self._consumer: Any = None
        self._started = False
        # Writes queued or being written, by sequence number: their paths.
        self._pending: dict[int, str] = {}
        self._seq = 0
        self._cond = threading.Condition()
        self._failures = Failures()

    @property
    def max_pending(self) -> int:
        """The most writes held at once (queued or being written)."""
        return self._max_pending

    def create_task(self, savefun: SaveFun | None) -> Task:
        """Return the default task: a :class:`SimpleWriter` with this writer's settings.

        Called once by the constructor when no ``task`` is given.

        Args:
            savefun: The writer's ``savefun``.
        """
        return SimpleWriter(savefun=savefun, fs=self.fs, out_dir=self.out_dir, **self._kwds)

    def create_queue(self) -> Any:
        """Return the queue that carries writes to the consumer (``put``/``get``).

        Called by the first write (and the first after :meth:`finalize`).

        Raises:
            NotImplementedError: In ``QueueWriter`` itself.
        """
        message = (
            f"{type(self).__name__} does not implement create_queue(), which must return the "
            "queue of writes (with put() and get()); subclass QueueWriter and implement "
            "create_queue() and create_consumer(q), or use ThreadQueueWriter or "
            "ProcessQueueWriter"
        )
        raise NotImplementedError(message)

    def create_consumer(self, q: Any) -> Any:
        """Return the consumer, not started yet, that runs ``self.consume(q)``.

        Called right after :meth:`create_queue` with its queue. The writer
        calls its ``start()``, and its ``join()`` in :meth:`finalize`.

        Args:
            q: The queue returned by :meth:`create_queue`.

        Raises:
            NotImplementedError: In ``QueueWriter`` itself.
        """
        message = (
            f"{type(self).__name__} does not implement create_consumer(q), which must return "
            "the consumer (with start() and join()) running self.consume(q); subclass "
            "QueueWriter and implement it, or use ThreadQueueWriter or ProcessQueueWriter"
        )
        raise NotImplementedError(message)

    def consume(self, q: Any) -> None:
        """Perform the writes taken from ``q`` in order, until ``None`` is taken.

        Runs in the consumer. Each item is a :class:`Write`, the 6-tuple
        ``(task, filename, out_dir, target, savefun, append)`` of PPE; the
        write is ``task(filename, out_dir, target, savefun=savefun,
        append=append)``, which never raises: it records a failure for the
        writer and frees the write's slot. ``q.task_done()`` is called after
        each item when ``q`` has it.

        Args:
            q: The queue returned by :meth:`create_queue`.
        """
        while True:
            item = self._next_item(q)
            if item is None:
                task_done(q)
                return
            item.perform()
            del item  # hold no copy of the target while waiting for the next write
            task_done(q)

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Queue a copy of ``target`` to be written to ``out_dir/filename``.

        Blocks while ``max_pending`` writes are pending.

        Raises:
            Exception: The failure of an earlier write, if any (this write is
                then not queued).
        """
        if savefun is not None:
            check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        self._collect()
        self._failures.raise_pending()
        self._wait_for_slot()
        self._failures.raise_pending()
        if not self._started:
            q = self.create_queue()
            consumer = self.create_consumer(q)
            self._start_consumer(q, consumer)
            self._queue, self._consumer, self._started = q, consumer, True
            _track(self)
        self._enqueue(path, filename, out_dir, target, savefun, append)

    def finalize(self) -> None:
        """Write everything queued, stop the consumer, raise the first failure if any.

        The writer can be used again afterwards (a new consumer is started).
        """
        if self._started:
            self._stop()
        self._failures.raise_pending()

    # -- shared machinery ------------------------------------------------------

    def _next_item(self, q: Any) -> Any:
        """The next item of ``q`` (``None``: stop)."""
        return q.get()

    def _new_write(self, path: str) -> int:
        with self._cond:
            self._seq += 1
            self._pending[self._seq] = path
            return self._seq

    def _finish(self, seq: int, failure: BaseException | None) -> None:
        """Record the outcome of write ``seq`` (hooks or failure), then free its slot."""
        with self._cond:
            path = self._pending.get(seq)
        if path is None:  # given up on already (its consumer was lost)
            return
        self._done(path, failure)
        with self._cond:
            self._pending.pop(seq, None)
            self._cond.notify_all()

    def _done(self, path: str, failure: BaseException | None) -> None:
        if failure is None:
            try:
                self._run_post_save_hooks(path)
                return
            except BaseException as exc:
                failure = exc
        add_note(failure, f"raised by {type(self).__name__} while writing {path!r}")
        self._failures.add(failure)

    def _fail_pending(self, reason: str) -> None:
        """Report every pending write as failed: the consumer will not write them."""
        with self._cond:
            lost = list(self._pending.values())
            self._pending.clear()
            self._cond.notify_all()
        for path in lost:
            failure = RuntimeError(
                f"the {type(self).__name__} consumer {reason} before writing {path!r}"
            )
            self._done(path, failure)

    def _wait_for_slot(self) -> None:
        while self._started and len(self._pending) >= self._max_pending:
            self._await_progress()
            if self._started and not is_alive(self._consumer):
                self._collect()  # gathers what it finished, then gives up on the rest

    def _collect(self) -> None:
        """Gather finished writes; if the consumer died, give up on its pending writes."""
        if self._started and not is_alive(self._consumer):
            self._stop()

    def _stop(self) -> None:
        self._started = False
        _live.discard(self)
        self._stop_consumer()

    # -- the consumer's kind ------------------------------------------------------

    def _start_consumer(self, q: Any, consumer: Any) -> None:
        consumer.start()

    def _await_progress(self) -> None:
        """Wait (at most about :data:`POLL_SECONDS`) for a pending write to finish."""
        with self._cond:
            if len(self._pending) >= self._max_pending:
                self._cond.wait(POLL_SECONDS)

    def _enqueue(
        self,
        path: str,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
    ) -> None:
        copy = snapshot(target)
        seq = self._new_write(path)
        task = functools.partial(self._run, seq)
        try:
            self._queue.put(Write(task, filename, out_dir, copy, savefun, append))
        except BaseException:
            with self._cond:
                self._pending.pop(seq, None)
            raise

    def _run(
        self,
        seq: int,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        failure: BaseException | None = None
        try:
            with fork_guard:
                self._task(filename, out_dir, target, savefun=savefun, append=append)
        except BaseException as exc:
            failure = exc
        del target
        self._finish(seq, failure)

    def _stop_consumer(self) -> None:
        consumer = self._consumer
        if is_alive(consumer):
            self._queue.put(None)
        consumer.join()
        self._queue = self._consumer = None
        self._fail_pending("stopped")

    def __getstate__(self) -> dict[str, Any]:
        message = f"{type(self).__name__} cannot be pickled (it owns a consumer)"
        raise TypeError(message)


class ThreadQueueWriter(QueueWriter):
    """Queue writes for one consumer thread.

    The queue is a ``queue.Queue``; the consumer a daemon ``threading.Thread``
    running :meth:`consume`. Post-save hooks run in the consumer thread.

    Example:
        >>> writer = ThreadQueueWriter(max_pending=4)
        >>> for it in range(3):
        ...     writer(f"snapshot_iter_{it}", "result", model.state_dict())
        >>> writer.finalize()
    """

    def create_queue(self) -> queue.Queue[Any]:
        """Return a new unbounded ``queue.Queue`` (``max_pending`` bounds the writes)."""
        return queue.Queue()

    def create_consumer(self, q: Any) -> threading.Thread:
        """Return a daemon thread running ``self.consume(q)``."""
        return threading.Thread(
            target=self.consume, args=(q,), name=f"ppe-{type(self).__name__}", daemon=True
        )
