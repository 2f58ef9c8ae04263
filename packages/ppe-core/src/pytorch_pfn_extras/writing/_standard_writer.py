"""``ThreadWriter`` and ``ProcessWriter``: one background worker per write."""

from __future__ import annotations

import abc
import os
import threading
from typing import Any

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
from pytorch_pfn_extras.writing._writer_base import SaveFun, Writer, check_savefun

__all__ = ["ProcessWriter", "StandardWriter", "ThreadWriter"]


class _Job(abc.ABC):
    """A started background write."""

    path: str

    @abc.abstractmethod
    def join(self) -> BaseException | None:
        """Wait for the write; return its failure, if any."""


class StandardWriter(Writer):
    """Base of the writers that run each write in its own background worker.

    A call copies the target (every tensor to CPU, see below), waits for the
    previous write to finish, and starts a new worker; it returns without
    waiting for the new write. A failed write is raised by the next call or by
    :meth:`finalize`, with its original type and message.

    The copy taken at call time is what is saved: training may keep updating
    the tensors in place while the worker writes. Tensors are saved as CPU
    tensors (storages shared between tensors stay shared).

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default.
        fs: Filesystem to write to; the local filesystem by default.
        out_dir: Default output directory.
        **kwds: Keyword arguments passed to every ``savefun`` call.
    """

    def __init__(
        self,
        savefun: SaveFun = torch.save,
        fs: FileSystem | None = None,
        out_dir: str = "",
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        self._savefun = check_savefun(savefun, type(self).__name__)
        self._kwds = kwds
        self._job: _Job | None = None
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
        """Start writing a copy of ``target`` to ``out_dir/filename`` in the background.

        Raises:
            Exception: The failure of a previous write, if any (this write is
                then not started).
        """
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        self._wait()
        self._failures.raise_pending()
        self._job = self._start(path, target, fun, append)

    def finalize(self) -> None:
        """Wait for the last write; raise its failure (or an earlier one's), if any."""
        self._wait()
        self._failures.raise_pending()

    @abc.abstractmethod
    def _start(self, path: str, target: Any, savefun: SaveFun, append: bool) -> _Job:
        """Copy ``target`` and start a worker writing it to ``path``."""

    def _wait(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            failure = job.join()
            if failure is not None:
                # A killed worker may have left its temporary: look again next time.
                self._scanned_dirs.discard(os.path.dirname(job.path))
                self._failures.add(failure)

    def __getstate__(self) -> dict[str, Any]:
        message = f"{type(self).__name__} cannot be pickled (it owns background workers)"
        raise TypeError(message)


class _ThreadJob(_Job):
    def __init__(
        self, writer: ThreadWriter, path: str, target: Any, savefun: SaveFun, append: bool
    ):
        self.path = path
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(writer, path, target, savefun, append),
            name=f"ppe-ThreadWriter({os.path.basename(path)})",
        )
        self._thread.start()

    def _run(
        self, writer: ThreadWriter, path: str, target: Any, savefun: SaveFun, append: bool
    ) -> None:
        try:
            directory, name = os.path.split(path)
            with fork_guard:
                writer.save(name, directory, target, savefun, append, **writer._kwds)
        except BaseException as exc:
            add_note(exc, f"raised by ThreadWriter while writing {path!r}")
            self._failure = exc

    def join(self) -> BaseException | None:
        self._thread.join()
        return self._failure


class ThreadWriter(StandardWriter):
    """Write each target in a new thread; the previous write is joined first.

    Example:
        >>> writer = ThreadWriter()
        >>> writer("snapshot_iter_100", "result", model.state_dict())
        >>> model.weight.data.add_(1.0)  # safe: the copy taken above is saved
        >>> writer.finalize()  # waits, and raises if a write failed
    """

    def _start(self, path: str, target: Any, savefun: SaveFun, append: bool) -> _Job:
        return _ThreadJob(self, path, snapshot(target), savefun, append)


class _ProcessJob(_Job):
    def __init__(self, writer: ProcessWriter, path: str, process: Any, conn: Any) -> None:
        self._writer = writer
        self.path = path
        self._process = process
        self._conn = conn

    def join(self) -> BaseException | None:
        try:
            result = self._conn.recv()
            received = True
        except EOFError:
            result, received = None, False
        finally:
            self._conn.close()
        self._process.join()
        failure: BaseException | None
        if result is not None:
            failure = decode_exception(result)
        elif not received:
            code = self._process.exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            failure = RuntimeError(
                f"the ProcessWriter worker writing {self.path!r} {how} before finishing "
                "(its stderr may tell why); the destination was left untouched"
            )
        else:
            try:
                self._writer._run_post_save_hooks(self.path)
                return None
            except BaseException as exc:
                failure = exc
        add_note(failure, f"raised by ProcessWriter while writing {self.path!r}")
        return failure


class ProcessWriter(StandardWriter):
    """Write each target in a new process; the previous write is joined first.

    The target is copied to one shared CPU buffer at call time, so the worker
    saves the state as of the call. Works with every start method; with
    ``spawn`` and ``forkserver``, ``savefun``, ``fs`` and the target must be
    picklable (module-level functions, not lambdas).

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default.
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
        savefun: SaveFun = torch.save,
        fs: FileSystem | None = None,
        out_dir: str = "",
        *,
        mp_context: MPContext = None,
        **kwds: Any,
    ) -> None:
        super().__init__(savefun=savefun, fs=fs, out_dir=out_dir, **kwds)
        self._context = resolve_context(mp_context, "ProcessWriter")

    def _start(self, path: str, target: Any, savefun: SaveFun, append: bool) -> _Job:
        packed = pack(target)
        self._scan(os.path.dirname(path))
        recv_conn, send_conn = self._context.Pipe(duplex=False)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=write_packed,
            args=(send_conn, self.fs, path, packed, savefun, append, self._kwds),
            name=f"ppe-ProcessWriter({os.path.basename(path)})",
        )
        try:
            start_process(process, self._context, "ProcessWriter", "savefun, fs and target")
        except BaseException:
            recv_conn.close()
            raise
        finally:
            send_conn.close()
        return _ProcessJob(self, path, process, recv_conn)
