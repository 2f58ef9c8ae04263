"""``ThreadQueueWriter`` and ``ProcessQueueWriter``: one consumer, a queue of writes."""

from __future__ import annotations

import abc
import atexit
import os
import queue
import threading
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from pytorch_pfn_extras.writing._errors import (
    EncodedError,
    Failures,
    add_note,
    decode_exception,
    encode_exception,
)
from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._mp import (
    MPContext,
    fork_guard,
    resolve_context,
    single_threaded_worker,
    start_process,
)
from pytorch_pfn_extras.writing._simple_writer import SimpleWriter
from pytorch_pfn_extras.writing._snapshot import pack, snapshot, unpack
from pytorch_pfn_extras.writing._writer_base import SaveFun, Writer, check_savefun

__all__ = ["ProcessQueueWriter", "QueueWriter", "ThreadQueueWriter"]

Task = Callable[..., Any]

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


class QueueWriter(Writer):
    """Base of the writers whose single consumer takes writes from a queue.

    A call copies the target (every tensor to CPU, storages shared as in the
    original) and enqueues it; it returns at once. The consumer, started by the
    first call, runs ``task(filename, out_dir, target, savefun=savefun,
    append=append)`` for each write in order. :meth:`finalize` drains the
    queue, stops the consumer and raises the first failed write, if any (a
    failure is also raised by the next call). Pending writes are drained at
    interpreter exit if :meth:`finalize` was not called.

    Args:
        savefun: ``savefun(target, fileobj, **kwds)`` of the default task;
            ``torch.save`` by default.
        fs: Filesystem of the default task; the local filesystem by default.
        out_dir: Default output directory.
        task: Callable doing one write, with a writer's call signature; a
            :class:`SimpleWriter` with ``savefun``, ``fs`` and ``kwds`` by default.
        **kwds: Keyword arguments passed to every ``savefun`` call of the
            default task.
    """

    def __init__(
        self,
        savefun: SaveFun = torch.save,
        fs: FileSystem | None = None,
        out_dir: str = "",
        task: Task | None = None,
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        owner = type(self).__name__
        self._savefun = check_savefun(savefun, owner)
        self._kwds = kwds
        if task is None:
            task = self.create_task(self._savefun)
        elif not callable(task):
            message = f"{owner}: task must be callable like a writer, got {task!r}"
            raise TypeError(message)
        self._task: Task = task
        self._started = False
        self._failures = Failures()

    def create_task(self, savefun: SaveFun) -> Task:
        """The default task: a :class:`SimpleWriter` sharing this writer's settings."""
        return SimpleWriter(savefun=savefun, fs=self.fs, out_dir=self.out_dir, **self._kwds)

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Enqueue a copy of ``target`` to be written to ``out_dir/filename``.

        Raises:
            Exception: The failure of an earlier write, if any (this write is
                then not enqueued).
        """
        if savefun is not None:
            check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        self._collect()
        self._failures.raise_pending()
        if not self._started:
            self._start_consumer()
            self._started = True
            _track(self)
        self._put(path, filename, out_dir, target, savefun, append)

    def finalize(self) -> None:
        """Write everything queued, stop the consumer, raise the first failure if any.

        The writer can be used again afterwards (a new consumer is started).
        """
        if self._started:
            self._started = False
            _live.discard(self)
            self._stop_consumer()
        self._failures.raise_pending()

    def _done(self, path: str, failure: BaseException | None) -> None:
        if failure is None:
            try:
                self._run_post_save_hooks(path)
                return
            except BaseException as exc:
                failure = exc
        add_note(failure, f"raised by {type(self).__name__} while writing {path!r}")
        self._failures.add(failure)

    @abc.abstractmethod
    def _start_consumer(self) -> None: ...

    @abc.abstractmethod
    def _put(
        self,
        path: str,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
    ) -> None: ...

    @abc.abstractmethod
    def _stop_consumer(self) -> None: ...

    def _collect(self) -> None:
        """Gather the results of finished writes (process consumers)."""

    def __getstate__(self) -> dict[str, Any]:
        message = f"{type(self).__name__} cannot be pickled (it owns a consumer)"
        raise TypeError(message)


_Item = tuple[str, str, str, Any, "SaveFun | None", bool]


class ThreadQueueWriter(QueueWriter):
    """Queue writes for one consumer thread.

    Example:
        >>> writer = ThreadQueueWriter()
        >>> for it in range(3):
        ...     writer(f"snapshot_iter_{it}", "result", model.state_dict())
        >>> writer.finalize()
    """

    _queue: queue.SimpleQueue[_Item | None]
    _consumer: threading.Thread

    def _start_consumer(self) -> None:
        self._queue = queue.SimpleQueue()
        self._consumer = threading.Thread(
            target=self._consume, args=(self._queue,), name="ppe-ThreadQueueWriter", daemon=True
        )
        self._consumer.start()

    def _consume(self, items: queue.SimpleQueue[_Item | None]) -> None:
        while True:
            item = items.get()
            if item is None:
                return
            path, filename, out_dir, target, savefun, append = item
            try:
                with fork_guard:
                    self._task(filename, out_dir, target, savefun=savefun, append=append)
            except BaseException as exc:
                self._done(path, exc)
            else:
                self._done(path, None)

    def _put(
        self,
        path: str,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
    ) -> None:
        self._queue.put((path, filename, out_dir, snapshot(target), savefun, append))

    def _stop_consumer(self) -> None:
        self._queue.put(None)
        self._consumer.join()


def _consume_in_process(tasks: Any, results: Any, task: Task, parent_pid: int) -> None:
    # Entry point of the ProcessQueueWriter consumer.
    single_threaded_worker()
    while True:
        try:
            item = tasks.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent_pid:  # the training process died
                return
            continue
        if item is None:
            break
        seq, data = item
        error: EncodedError | None = None
        try:
            filename, out_dir, packed, savefun, append = ForkingPickler.loads(data)
            task(filename, out_dir, unpack(packed), savefun=savefun, append=append)
        except BaseException as exc:
            error = encode_exception(exc)
        results.send((seq, error))
    results.close()


class ProcessQueueWriter(QueueWriter):
    """Queue writes for one consumer process.

    The target is copied to one shared CPU buffer at call time and pickled
    right away, so a target that cannot be sent fails in the call. With
    ``spawn``/``forkserver``, ``task`` and ``savefun`` must be picklable.

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default.
        fs: Filesystem of the default task; the local filesystem by default.
        out_dir: Default output directory.
        task: Callable doing one write (see :class:`QueueWriter`).
        mp_context: Start method name or multiprocessing context; the
            default context when ``None``.
        **kwds: Keyword arguments passed to every ``savefun`` call of the
            default task.

    Example:
        >>> writer = ProcessQueueWriter(mp_context="spawn")
        >>> manager.extend(extensions.snapshot(writer=writer), trigger=(1, "epoch"))
    """

    def __init__(
        self,
        savefun: SaveFun = torch.save,
        fs: FileSystem | None = None,
        out_dir: str = "",
        task: Task | None = None,
        *,
        mp_context: MPContext = None,
        **kwds: Any,
    ) -> None:
        super().__init__(savefun=savefun, fs=fs, out_dir=out_dir, task=task, **kwds)
        self._context = resolve_context(mp_context, "ProcessQueueWriter")
        self._pending: dict[int, str] = {}
        self._seq = 0

    def _start_consumer(self) -> None:
        context = self._context
        self._queue = context.Queue()
        self._results, send_conn = context.Pipe(duplex=False)
        self._consumer = context.Process(  # type: ignore[attr-defined]
            target=_consume_in_process,
            args=(self._queue, send_conn, self._task, os.getpid()),
            name="ppe-ProcessQueueWriter",
            daemon=True,
        )
        try:
            start_process(self._consumer, context, "ProcessQueueWriter", "task")
        except BaseException:
            self._results.close()
            self._queue.close()
            raise
        finally:
            send_conn.close()

    def _put(
        self,
        path: str,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
    ) -> None:
        try:
            data = bytes(ForkingPickler.dumps((filename, out_dir, pack(target), savefun, append)))
        except Exception as exc:
            message = (
                f"ProcessQueueWriter: the target and savefun must be picklable to be sent "
                f"to the writer process: {exc}"
            )
            raise TypeError(message) from exc
        self._seq += 1
        self._pending[self._seq] = path
        self._queue.put((self._seq, data))

    def _handle(self, message: tuple[int, EncodedError | None]) -> None:
        seq, error = message
        path = self._pending.pop(seq)
        self._done(path, None if error is None else decode_exception(error))

    def _collect(self) -> None:
        if not self._started:
            return
        while self._results.poll():
            self._handle(self._results.recv())
        if not self._consumer.is_alive():  # killed: restart on the next call
            self._started = False
            _live.discard(self)
            self._stop_consumer()

    def _stop_consumer(self) -> None:
        if self._consumer.is_alive():
            self._queue.put(None)
        else:  # nobody will read what is still buffered: do not wait to flush it
            self._queue.cancel_join_thread()
        while True:
            try:
                message = self._results.recv()
            except EOFError:
                break
            self._handle(message)
        self._consumer.join()
        self._results.close()
        self._queue.close()
        self._queue.join_thread()
        code = self._consumer.exitcode
        for path in self._pending.values():
            self._done(
                path,
                RuntimeError(
                    f"the ProcessQueueWriter consumer exited with code {code} before "
                    f"writing {path!r}"
                ),
            )
        self._pending.clear()
