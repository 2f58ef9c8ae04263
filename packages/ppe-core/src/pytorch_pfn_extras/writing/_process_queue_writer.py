"""``ProcessQueueWriter``: a consumer process takes writes from a bounded queue.

The target of a write is packed (tensor data in one shared buffer) and pickled
when the write is requested; the queue carries a :class:`_PickledWrite`, which
the consumer unpickles as a :class:`~._queue_writer.Write` (PPE's 6-tuple) whose
task is a :class:`_RemoteTask`. That task runs the writer's task and reports the outcome
on a pipe back to the training process, which then runs the post-save hooks and
frees the write's slot. The consumer finds the writer's task and the pipe in
``_consumer_side``: inherited with ``fork``, restored with the pickled writer
under ``spawn``/``forkserver``.
"""

from __future__ import annotations

import os
import queue
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple

import torch

from pytorch_pfn_extras.writing._errors import (
    EncodedError,
    Failures,
    decode_exception,
    encode_exception,
)
from pytorch_pfn_extras.writing._mp import (
    MPContext,
    fork_guard,
    resolve_context,
    single_threaded_worker,
    start_process,
)
from pytorch_pfn_extras.writing._queue_writer import (
    DEFAULT_MAX_PENDING,
    POLL_SECONDS,
    QueueWriter,
    Task,
    Write,
    is_alive,
)
from pytorch_pfn_extras.writing._snapshot import pack, unpack
from pytorch_pfn_extras.writing._writer_base import SaveFun, Writer

__all__ = ["ProcessQueueWriter"]

PARENT_CHECK_SECONDS = 1.0
"""How often an idle consumer process checks that the training process is alive."""


class _Channel(NamedTuple):
    task: Task
    reply: Any  # the sending end of the results pipe


class _ConsumerSide:
    """What the consumer process needs to run tasks and report on them."""

    channel: _Channel | None = None
    single_threaded_pid = 0


_consumer_side = _ConsumerSide()


class _RemoteTask:
    """The task of a write in the consumer process: run the writer's task, report."""

    def __init__(self, seq: int, error: EncodedError | None = None) -> None:
        self.seq = seq
        self.error = error

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        channel = _consumer_side.channel
        if channel is None:
            message = (
                "a ProcessQueueWriter write can only run in the writer's consumer process "
                "(started by the writer from create_consumer)"
            )
            raise RuntimeError(message)
        error = self.error
        if error is None:
            try:
                channel.task(filename, out_dir, target, savefun=savefun, append=append)
            except BaseException as exc:
                error = encode_exception(exc)
        channel.reply.send((self.seq, error))


def _load_write(seq: int, filename: str, out_dir: str, append: bool, data: bytes) -> Write:
    # Runs in the consumer when it takes a write from the queue.
    if _consumer_side.single_threaded_pid != os.getpid():
        single_threaded_worker()
        _consumer_side.single_threaded_pid = os.getpid()
    try:
        packed, savefun = ForkingPickler.loads(data)
        target = unpack(packed)
    except BaseException as exc:
        return Write(_RemoteTask(seq, encode_exception(exc)), filename, out_dir, None, None, append)
    return Write(_RemoteTask(seq), filename, out_dir, target, savefun, append)


class _PickledWrite:
    """A write pickled when requested; unpickles as a :class:`Write` (:func:`_load_write`)."""

    def __init__(self, seq: int, filename: str, out_dir: str, append: bool, data: bytes) -> None:
        self.args = (seq, filename, out_dir, append, data)

    def __reduce__(self) -> tuple[Any, tuple[int, str, str, bool, bytes]]:
        return (_load_write, self.args)


class ProcessQueueWriter(QueueWriter):
    """Queue writes for one consumer process.

    The target is copied to one shared CPU buffer at call time and pickled
    right away, so a target that cannot be sent fails in the call. The queue is
    a ``multiprocessing.JoinableQueue``, the consumer a daemon
    ``multiprocessing.Process`` running :meth:`consume`. Post-save hooks run in
    the calling process when a finished write is collected (by a later call,
    while blocked on a full queue, or by :meth:`finalize`). With
    ``spawn``/``forkserver``, the writer is pickled into the consumer, so
    ``task``, ``savefun`` and ``fs`` must be picklable.

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default
            (also when ``None``).
        fs: Filesystem of the default task; the local filesystem by default.
        out_dir: Default output directory.
        task: Callable doing one write (see :class:`QueueWriter`).
        max_pending: Most writes held at once, queued or being written.
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
        savefun: SaveFun | None = torch.save,
        fs: Any = None,
        out_dir: str = "",
        task: Task | None = None,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        mp_context: MPContext = None,
        **kwds: Any,
    ) -> None:
        super().__init__(
            savefun=savefun, fs=fs, out_dir=out_dir, task=task, max_pending=max_pending, **kwds
        )
        self._context = resolve_context(mp_context, type(self).__name__)
        self._results: Any = None
        self._reply: Any = None
        self._parent_pid = os.getpid()

    def create_queue(self) -> Any:
        """Return a new ``multiprocessing.JoinableQueue`` of the writer's context."""
        return self._context.JoinableQueue()

    def create_consumer(self, q: Any) -> Any:
        """Return a daemon ``multiprocessing.Process`` running ``self.consume(q)``."""
        return self._context.Process(  # type: ignore[attr-defined]
            target=self.consume, args=(q,), name=f"ppe-{type(self).__name__}", daemon=True
        )

    def _next_item(self, q: Any) -> Any:
        while True:
            try:
                return q.get(timeout=PARENT_CHECK_SECONDS)
            except queue.Empty:
                if os.getppid() != self._parent_pid:  # the training process died
                    return None

    def _start_consumer(self, q: Any, consumer: Any) -> None:
        self._results, reply = self._context.Pipe(duplex=False)
        self._parent_pid = os.getpid()
        self._reply = reply  # pickled with the writer under spawn
        try:
            with fork_guard:
                _consumer_side.channel = _Channel(self._task, reply)  # inherited under fork
                try:
                    start_process(
                        consumer.start, self._context, type(self).__name__, "task, savefun and fs"
                    )
                finally:
                    _consumer_side.channel = None
        except BaseException:
            self._results.close()
            _close_queue(q, cancel=True)
            raise
        finally:
            self._reply = None
            reply.close()  # the consumer holds the only sending end: EOF when it exits

    def _enqueue(
        self,
        path: str,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
    ) -> None:
        packed = pack(target, shared=True)
        try:
            data = bytes(ForkingPickler.dumps((packed, savefun)))
        except Exception as exc:
            message = (
                f"{type(self).__name__}: the target and savefun must be picklable to be sent "
                f"to the writer process: {exc}"
            )
            raise TypeError(message) from exc
        del packed
        seq = self._new_write(path)
        try:
            self._queue.put(_PickledWrite(seq, filename, out_dir, append, data))
        except BaseException:
            with self._cond:
                self._pending.pop(seq, None)
            raise

    def _handle(self, message: tuple[int, EncodedError | None]) -> None:
        seq, error = message
        self._finish(seq, None if error is None else decode_exception(error))

    def _receive(self, timeout: float) -> bool:
        """Handle one result if one comes within ``timeout``; ``False`` at EOF or timeout."""
        try:
            if not self._results.poll(timeout):
                return False
            self._handle(self._results.recv())
        except (EOFError, OSError):
            return False
        return True

    def _await_progress(self) -> None:
        self._receive(POLL_SECONDS)

    def _collect(self) -> None:
        if not self._started:
            return
        while self._receive(0):
            pass
        super()._collect()

    def _stop_consumer(self) -> None:
        consumer, q = self._consumer, self._queue
        alive = is_alive(consumer)
        if alive:
            q.put(None)
        while True:
            try:
                message = self._results.recv()
            except (EOFError, OSError):
                break
            self._handle(message)
        consumer.join()
        self._results.close()
        _close_queue(q, cancel=not alive)  # nobody reads what a dead consumer left
        self._queue = self._consumer = self._results = None
        self._fail_pending(f"exited with code {getattr(consumer, 'exitcode', None)}")

    def __getstate__(self) -> dict[str, Any]:
        # The writer as the consumer process sees it (pickled under spawn/forkserver).
        state = Writer.__getstate__(self)
        state.update(
            _queue=None,
            _consumer=None,
            _results=None,
            _started=False,
            _pending={},
            _post_save_hooks=[],
        )
        del state["_cond"], state["_failures"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()
        self._failures = Failures()
        if self._reply is not None:  # this is the consumer being started
            _consumer_side.channel = _Channel(self._task, self._reply)
            self._reply = None


def _close_queue(q: Any, *, cancel: bool) -> None:
    """Close a multiprocessing queue (if it is one), waiting for its feeder unless ``cancel``."""
    if cancel and hasattr(q, "cancel_join_thread"):
        q.cancel_join_thread()
    if hasattr(q, "close"):
        q.close()
    if hasattr(q, "join_thread"):
        q.join_thread()
