"""``StandardWriter``, ``ThreadWriter`` and ``ProcessWriter``: one background worker per write."""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

import torch

from pytorch_pfn_extras.writing._errors import Failures, add_note, decode_exception
from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._mp import (
    MPContext,
    fork_guard,
    resolve_context,
    start_process,
    write_packed,
)
from pytorch_pfn_extras.writing._snapshot import pack, snapshot
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
    failed write is raised by the next call or by :meth:`finalize`, with its
    original type and message (a user's ``multiprocessing.Process`` worker that
    exits with a non-zero code is reported as a ``RuntimeError``).

    Subclass it and implement :meth:`create_worker` to run writes in your own
    kind of worker; :class:`ThreadWriter` and :class:`ProcessWriter` are built
    that way.

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
        fs: FileSystem | None = None,
        out_dir: str = "",
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        owner = type(self).__name__
        if (
            type(self).create_worker is StandardWriter.create_worker
            and type(self).__call__ is StandardWriter.__call__
        ):
            message = (
                f"{owner} must implement create_worker(filename, out_dir, target, *, "
                "savefun=None, append=False, **savefun_kwargs) returning a worker with "
                "start() and join() (a threading.Thread, for instance); or use "
                "ThreadWriter or ProcessWriter"
            )
            raise TypeError(message)
        self._savefun = resolve_savefun(savefun, owner)
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
        """
        message = f"{type(self).__name__} does not implement create_worker"
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
            add_note(
                failure, f"raised by {type(self).__name__} while writing {self._worker_path!r}"
            )
            self._failures.add(failure)

    def __getstate__(self) -> dict[str, Any]:
        message = f"{type(self).__name__} cannot be pickled (it owns background workers)"
        raise TypeError(message)


def _failure_of(worker: Worker, path: str) -> BaseException | None:
    """The failure of a joined worker: ours record it; a user's process has an exit code."""
    if isinstance(worker, _ThreadWorker | _ProcessWorker):
        return worker.failure
    code = getattr(worker, "exitcode", None)  # a multiprocessing.Process from a subclass
    if isinstance(code, int) and code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return RuntimeError(f"the worker process writing {path!r} {how}")
    return None


class _ThreadWorker(threading.Thread):
    """A thread running ``writer.save(...)`` that keeps the exception it raised."""

    def __init__(
        self,
        writer: Writer,
        args: tuple[str, str, Any, SaveFun | None, bool],
        savefun_kwargs: dict[str, Any],
    ) -> None:
        super().__init__(name=f"ppe-{type(writer).__name__}({os.path.basename(args[0])})")
        self._writer = writer
        self._save_args = args
        self._savefun_kwargs = savefun_kwargs
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with fork_guard:
                self._writer.save(*self._save_args, **self._savefun_kwargs)
        except BaseException as exc:
            self.failure = exc
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


class _ProcessWorker:
    """A writer process and the pipe on which it reports; its failure once joined."""

    def __init__(
        self, writer: ProcessWriter, path: str, process: Any, conn: Any, recv_conn: Any
    ) -> None:
        self._writer = writer
        self.path = path
        self.process = process
        self._send_conn = conn
        self._recv_conn = recv_conn
        self.failure: BaseException | None = None

    def start(self) -> None:
        writer = self._writer
        writer._scan(os.path.dirname(self.path))
        try:
            start_process(
                self.process, writer._context, type(writer).__name__, "savefun, fs and target"
            )
        except BaseException:
            self._recv_conn.close()
            raise
        finally:
            self._send_conn.close()

    def join(self) -> None:
        try:
            result = self._recv_conn.recv()
            received = True
        except EOFError:
            result, received = None, False
        finally:
            self._recv_conn.close()
        self.process.join()
        if result is not None:
            self.failure = decode_exception(result)
        elif not received:
            code = self.process.exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self.failure = RuntimeError(
                f"the {type(self._writer).__name__} worker writing {self.path!r} {how} before "
                "finishing (its stderr may tell why); the destination was left untouched"
            )
        else:
            try:
                self._writer._run_post_save_hooks(self.path)
            except BaseException as exc:
                self.failure = exc


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
        fs: FileSystem | None = None,
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
    ) -> Worker:
        """Copy ``target`` to a shared buffer; return a worker whose process saves it.

        The worker has ``start()``, ``join()`` and ``process`` (the
        ``multiprocessing`` process, created but not started).
        """
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        # Pickled to a spawned worker: shared memory already; inherited by a forked one.
        packed = pack(target, shared=self._context.get_start_method() != "fork")
        recv_conn, send_conn = self._context.Pipe(duplex=False)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=write_packed,
            args=(send_conn, self.fs, path, packed, fun, append, savefun_kwargs),
            name=f"ppe-{type(self).__name__}({os.path.basename(path)})",
        )
        return _ProcessWorker(self, path, process, send_conn, recv_conn)
