"""``StandardWriter``, ``ThreadWriter`` and ``ProcessWriter``: one background worker per write."""

from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Any, NamedTuple, Protocol

import torch

from pytorch_pfn_extras.writing._errors import Failures, add_note, decode_exception
from pytorch_pfn_extras.writing._mp import (
    MPContext,
    fork_guard,
    resolve_context,
    start_process,
    write_packed,
)
from pytorch_pfn_extras.writing._snapshot import PackedTarget, pack, snapshot
from pytorch_pfn_extras.writing._writer_base import (
    SaveFun,
    Writer,
    check_savefun,
    resolve_savefun,
)

__all__ = ["ProcessWriter", "StandardWriter", "ThreadWriter", "Worker"]


class Worker(Protocol):
    """What :meth:`StandardWriter.create_worker` returns: a ``threading.Thread`` or
    ``multiprocessing.Process``, or any object with these two methods."""

    def start(self) -> None:
        """Start the write in the background."""
        ...

    def join(self) -> None:
        """Wait for the write to finish."""
        ...


class StandardWriter(Writer):
    """Base of the writers that run each write in its own background worker.

    A call waits for the previous write to finish (raising its failure, if
    any), then asks :meth:`create_worker` for a worker (a thread, a process,
    anything with ``start()`` and ``join()``) and starts it; it returns without
    waiting for the new write. At most one write is in flight, so at most one
    copy of the target is held. :meth:`finalize` joins the last worker. A
    worker that exits with a non-zero code (``exitcode``; ``-1`` for a thread
    whose write raised) is reported, as in PPE 0.9, by the next call or by
    :meth:`finalize` as ``RuntimeError("exit code is non-zero: N (...)")``,
    whose message names the file and the error and whose ``__cause__`` is the
    error the write raised (for a process, with the worker's traceback as its
    own ``__cause__``).

    Subclass it and implement :meth:`create_worker` to run writes in your own
    kind of worker; :class:`ThreadWriter` and :class:`ProcessWriter` are built
    that way. ``StandardWriter`` itself can be constructed; its
    :meth:`create_worker` raises :class:`NotImplementedError` when a write is
    requested.

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default
            (also when ``None``).
        fs: Filesystem to write to; the local filesystem by default.
        out_dir: Default output directory.
        **kwds: Keyword arguments passed to every ``savefun`` call (they reach
            :meth:`create_worker` as ``savefun_kwargs``).

    Example:
        >>> class LoggedThreadWriter(StandardWriter):
        ...     def create_worker(self, filename, out_dir, target, *, savefun=None,
        ...                       append=False, **savefun_kwargs):
        ...         print(f"writing {filename}")
        ...         return threading.Thread(
        ...             target=self.save,
        ...             args=(filename, out_dir, target, savefun, append),
        ...             kwargs=savefun_kwargs,
        ...         )
    """

    def __init__(
        self,
        savefun: SaveFun | None = torch.save,
        fs: Any = None,
        out_dir: str = "",
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        self._savefun = resolve_savefun(savefun, type(self).__name__)
        self._kwds = kwds
        self._worker: Worker | None = None
        self._worker_path = ""
        self._failures = Failures()

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Start writing ``target`` to ``out_dir/filename`` in the background.

        The previous write is waited for first.

        Raises:
            Exception: The failure of a previous write, if any (this write is
                then not started).
        """
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        self._wait()
        self._failures.raise_pending()
        worker = self.create_worker(
            filename, out_dir, target, savefun=fun, append=append, **self._kwds
        )
        worker.start()
        self._worker, self._worker_path = worker, path

    def create_worker(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
        **savefun_kwargs: Any,
    ) -> Worker:
        """Return a worker, not started yet, that writes ``target`` to ``out_dir/filename``.

        Called by :meth:`__call__` (in the calling thread) once the previous
        worker has finished; :meth:`__call__` then calls its ``start()``, and
        the next call or :meth:`finalize` its ``join()``. A worker usually
        runs ``self.save(filename, out_dir, target, savefun, append,
        **savefun_kwargs)``, which is crash-safe and runs the post-save hooks.
        ``target`` is the caller's object: a worker that writes it later
        should write a copy if the caller may change it meanwhile (the
        built-in writers do).

        Args:
            filename: File name relative to ``out_dir``.
            out_dir: Output directory.
            target: The object to save.
            savefun: The save function to use (the writer's, unless the call
                gave one); ``torch.save`` when ``None``.
            append: Append to the file instead of replacing it.
            **savefun_kwargs: Keyword arguments of ``savefun`` (the writer's
                ``**kwds``).

        Returns:
            An object with ``start()`` and ``join()``.

        Raises:
            NotImplementedError: In ``StandardWriter`` itself.
        """
        message = (
            f"{type(self).__name__} does not implement create_worker(filename, out_dir, "
            "target, *, savefun=None, append=False, **savefun_kwargs), which must return a "
            "worker with start() and join() (a threading.Thread, for instance); subclass "
            "StandardWriter and implement it, or use ThreadWriter or ProcessWriter"
        )
        raise NotImplementedError(message)

    def finalize(self) -> None:
        """Wait for the last write; raise its failure (or an earlier one's), if any."""
        self._wait()
        self._failures.raise_pending()

    def _wait(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        worker.join()
        failure = _failure_of(worker, self._worker_path)
        if failure is not None:
            # A killed worker may have left its temporary: look again next time.
            self._scanned_dirs.discard(os.path.dirname(self._worker_path))
            self._failures.add(failure)

    def __getstate__(self) -> dict[str, Any]:
        message = f"{type(self).__name__} cannot be pickled (it owns background workers)"
        raise TypeError(message)


def _nonzero_exit(code: int, detail: str, cause: BaseException | None = None) -> RuntimeError:
    """PPE 0.9's error for a worker that exited with ``code``; ``cause`` is what it raised."""
    error = RuntimeError(f"exit code is non-zero: {code} ({detail})")
    if cause is not None:
        error.__cause__ = cause
    return error


def _failed_write(code: int, owner: str, path: str, cause: BaseException) -> RuntimeError:
    detail = f"{owner} failed to write {path!r}: {type(cause).__name__}: {cause}"
    return _nonzero_exit(code, detail, cause)


def _failure_of(worker: Worker, path: str) -> BaseException | None:
    """The failure of a joined worker: ours record it; a user's process has an exit code."""
    if isinstance(worker, _ThreadWorker | _WriterProcess):
        return worker.failure
    code = getattr(worker, "exitcode", None)  # a multiprocessing.Process from a subclass
    if isinstance(code, int) and code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return _nonzero_exit(code, f"the worker process writing {path!r} {how}")
    return None


class _ThreadWorker(threading.Thread):
    """A thread running ``writer.save(...)``; ``exitcode`` is ``-1`` if it raised.

    ``failure`` is then the error reported for it, caused by what ``save`` raised.
    """

    def __init__(
        self,
        writer: Writer,
        args: tuple[str, str, Any, SaveFun | None, bool],
        savefun_kwargs: dict[str, Any],
    ) -> None:
        super().__init__(name=f"ppe-{type(writer).__name__}({os.path.basename(args[0])})")
        self._writer = writer
        self._path = writer._destination(args[0], args[1])
        self._save_args = args
        self._savefun_kwargs = savefun_kwargs
        #: ``None`` while running, then ``0``, or ``-1`` if the write raised (as in PPE 0.9).
        self.exitcode: int | None = None
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with fork_guard:
                self._writer.save(*self._save_args, **self._savefun_kwargs)
        except BaseException as exc:
            self.exitcode = -1
            self.failure = _failed_write(-1, type(self._writer).__name__, self._path, exc)
        else:
            self.exitcode = 0
        finally:
            del self._save_args  # the copy is not needed any more


class ThreadWriter(StandardWriter):
    """Write each target in a new thread; the previous write is joined first.

    The target is copied when the write is requested (every tensor to CPU,
    storages shared as in the original), and the copy is saved: training may
    keep updating the tensors in place while the thread writes.

    Example:
        >>> writer = ThreadWriter()
        >>> writer("snapshot_iter_100", "result", model.state_dict())
        >>> model.weight.data.add_(1.0)  # safe: the copy taken above is saved
        >>> writer.finalize()  # waits, and raises if a write failed
    """

    def create_worker(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
        **savefun_kwargs: Any,
    ) -> threading.Thread:
        """Copy ``target`` and return a thread that saves the copy with :meth:`save`."""
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        copy = snapshot(target)
        return _ThreadWorker(self, (filename, out_dir, copy, fun, append), savefun_kwargs)


class _WriterProcess(multiprocessing.Process):
    """The ``multiprocessing.Process`` of one ``ProcessWriter`` write.

    It starts in the writer's multiprocessing context. ``join()`` also
    collects the outcome the process reports on its pipe: then ``failure`` is
    the error to report (a non-zero exit, or a failed post-save hook), if any.
    """

    def __init__(
        self,
        writer: ProcessWriter,
        path: str,
        packed: PackedTarget,
        savefun: SaveFun,
        append: bool,
        savefun_kwargs: dict[str, Any],
    ) -> None:
        recv_conn, send_conn = writer._context.Pipe(duplex=False)
        super().__init__(
            target=write_packed,
            args=(send_conn, writer.fs, path, packed, savefun, append, savefun_kwargs),
            name=f"ppe-{type(writer).__name__}({os.path.basename(path)})",
        )
        # Parent-side state, not sent to a spawned process (see ``__getstate__``).
        self._parent: _ParentSide | None = _ParentSide(writer, path, send_conn, recv_conn)
        self.failure: BaseException | None = None

    def _Popen(self, process_obj: Any) -> Any:  # type: ignore[override]
        # ``multiprocessing.Process`` starts in the default context: use the writer's.
        assert self._parent is not None
        process_class: Any = self._parent.writer._context.Process  # type: ignore[attr-defined]
        return process_class._Popen(process_obj)

    def start(self) -> None:
        """Start the write (once); a pickling failure under spawn is a clear ``TypeError``."""
        parent = self._parent
        if parent is None:
            super().start()  # raises: a process object is started once
            return
        writer = parent.writer
        writer._scan(os.path.dirname(parent.path))
        try:
            start_process(
                super().start, writer._context, type(writer).__name__, "savefun, fs and target"
            )
        except BaseException:
            parent.recv_conn.close()
            self._parent = None
            raise
        finally:
            parent.send_conn.close()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the process, then collect its outcome into ``failure``."""
        parent = self._parent
        if parent is None or (timeout is not None and not parent.recv_conn.poll(timeout)):
            super().join(timeout)
            return
        self._parent = None
        try:
            result = parent.recv_conn.recv()
            received = True
        except EOFError:
            result, received = None, False
        finally:
            parent.recv_conn.close()
        super().join()
        self.failure = self._outcome(parent, result, received)

    def _outcome(self, parent: _ParentSide, result: Any, received: bool) -> BaseException | None:
        code = self.exitcode if self.exitcode is not None else 0
        owner = type(parent.writer).__name__
        if result is not None:
            return _failed_write(code or 1, owner, parent.path, decode_exception(result))
        if not received or code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return _nonzero_exit(
                code,
                f"the {owner} worker writing {parent.path!r} {how} before finishing (its "
                "stderr may tell why); the destination was left untouched",
            )
        try:
            parent.writer._run_post_save_hooks(parent.path)
        except BaseException as exc:
            add_note(exc, f"raised by a post-save hook of {owner} after writing {parent.path!r}")
            return exc
        return None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_parent"] = None  # the writer and the parent's ends of the pipe stay here
        return state


class _ParentSide(NamedTuple):
    """What the parent of a :class:`_WriterProcess` needs: its writer and pipe ends."""

    writer: ProcessWriter
    path: str
    send_conn: Any
    recv_conn: Any


class ProcessWriter(StandardWriter):
    """Write each target in a new process; the previous write is joined first.

    The target is copied to one shared CPU buffer at call time, so the worker
    saves the state as of the call. Works with every start method; with
    ``spawn`` and ``forkserver``, ``savefun``, ``fs`` and the target must be
    picklable (module-level functions, not lambdas). Post-save hooks run in
    the calling process when the write is collected (next call or
    :meth:`finalize`).

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default
            (also when ``None``).
        fs: Filesystem to write to; the local filesystem by default.
        out_dir: Default output directory.
        mp_context: Start method name (``"fork"``, ``"spawn"``,
            ``"forkserver"``) or multiprocessing context; the default context
            when ``None``.
        **kwds: Keyword arguments passed to every ``savefun`` call.

    Example:
        >>> writer = ProcessWriter(mp_context="spawn")
        >>> manager.extend(extensions.snapshot(writer=writer), trigger=(1, "epoch"))
    """

    def __init__(
        self,
        savefun: SaveFun | None = torch.save,
        fs: Any = None,
        out_dir: str = "",
        *,
        mp_context: MPContext = None,
        **kwds: Any,
    ) -> None:
        super().__init__(savefun=savefun, fs=fs, out_dir=out_dir, **kwds)
        self._context = resolve_context(mp_context, type(self).__name__)

    def create_worker(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
        **savefun_kwargs: Any,
    ) -> multiprocessing.Process:
        """Copy ``target`` to a shared buffer; return a process, not started, that saves it.

        The process is a ``multiprocessing.Process`` that starts in the
        writer's ``mp_context``. Its ``exitcode`` is ``1`` if the write
        raised; the writer reports that at the next call or :meth:`finalize`.
        """
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        # Pickled to a spawned worker: shared memory already; inherited by a forked one.
        packed = pack(target, shared=self._context.get_start_method() != "fork")
        return _WriterProcess(self, path, packed, fun, append, savefun_kwargs)
