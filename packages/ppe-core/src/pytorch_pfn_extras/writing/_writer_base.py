"""The ``Writer`` base class: destination handling, atomic saves, hooks."""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from pytorch_pfn_extras.writing._adapters import adapt_file_system
from pytorch_pfn_extras.writing._atomic import SaveFun, write_atomic, write_in_place
from pytorch_pfn_extras.writing._cleanup import scan_stale_temporaries
from pytorch_pfn_extras.writing._fs import FileSystem

__all__ = ["PostSaveHook", "SaveFun", "Writer", "check_savefun", "resolve_savefun"]

PostSaveHook = Callable[[str], None]


def check_savefun(savefun: Any, owner: str) -> SaveFun:
    """Return ``savefun`` if callable, else raise a ``TypeError`` naming it."""
    if not callable(savefun):
        message = (
            f"{owner}: savefun must be a callable like torch.save(target, fileobj, **kwds), "
            f"got {savefun!r} of type {type(savefun).__name__}"
        )
        raise TypeError(message)
    return savefun  # type: ignore[no-any-return]


def resolve_savefun(savefun: Any, owner: str) -> SaveFun:
    """``torch.save`` for ``None`` (as in PPE), else ``savefun`` checked by :func:`check_savefun`."""
    return torch.save if savefun is None else check_savefun(savefun, owner)


def _path_str(value: Any, what: str, owner: str) -> str:
    try:
        path = os.fspath(value)
    except TypeError:
        path = None
    if not isinstance(path, str):
        message = f"{owner}: {what} must be a str or os.PathLike, got {value!r}"
        raise TypeError(message)
    return path


class Writer(abc.ABC):
    """Base class of the writers that save objects into an output directory.

    A writer is called as ``writer(filename, out_dir, target, savefun=None,
    append=False)``; it writes ``savefun(target, fileobj)`` to
    ``out_dir/filename``. Every built-in writer writes through :meth:`save`,
    which is crash-safe: the data goes to a hidden temporary file in the same
    directory (``.{filename}.tmp-...``), is flushed and fsync'ed, renamed over
    the destination, and the directory is fsync'ed. The destination is never
    missing (once written) nor half-written, even if the process is killed.

    Subclasses implement :meth:`__call__`, usually by calling :meth:`save` now
    or later. A writer is also a context manager that calls :meth:`finalize`
    on exit.

    Args:
        fs: Filesystem to write to: an object with the :class:`FileSystem`
            methods, a pfio file system (``pfio.v2.from_url("s3://bucket/prefix")``)
            or an fsspec one (``s3fs.S3FileSystem(...)``); the local filesystem
            by default.
        out_dir: Default output directory, set again by :meth:`initialize`.

    Attributes:
        fs: The filesystem written to: ``fs`` itself when it has the
            :class:`FileSystem` methods, else its adapter
            (:class:`PfioFileSystem` or :class:`FsspecFileSystem`, whose
            ``wrapped`` is the object given); :class:`LocalFileSystem` by default.
        out_dir: The output directory given at construction or to
            :meth:`initialize`.
    """

    def __init__(self, fs: Any = None, out_dir: str = "") -> None:
        owner = type(self).__name__
        self.fs: FileSystem = adapt_file_system(fs, owner)
        self.out_dir: str = _path_str(out_dir, "out_dir", owner)
        self._scanned_dirs: set[str] = set()
        # Directories to scan again from this time.monotonic() on: a temporary kept there
        # for its lease could have expired by then.
        self._rescan_at: dict[str, float] = {}
        self._post_save_hooks: list[PostSaveHook] = []

    @abc.abstractmethod
    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Write ``target`` to ``out_dir/filename``.

        Args:
            filename: File name, relative to ``out_dir`` (may contain ``/``).
            out_dir: Output directory; created if missing.
            target: The object to save.
            savefun: ``savefun(target, fileobj, **kwds)`` writing to a binary
                file object; the writer's own ``savefun`` when ``None`` (itself
                ``torch.save`` unless the writer was given another).
            append: Append the new data to the current content of the file
                instead of replacing it: atomically by copying the file (see
                :meth:`save`), or, for :class:`SimpleWriter` on the local
                filesystem, with one ``write`` at the end of the file (see there).
        """

    def initialize(self, out_dir: str) -> None:
        """Set the output directory and remove stale temporary files in it.

        Called by the training manager before training starts. Temporary files
        left there by killed processes are removed once provably abandoned (see
        :func:`remove_stale_temporaries`): of this host, once their process is gone;
        of any host, once their lease expired. Those of live writers are kept; a
        temporary kept for its lease is looked at again by the first write after
        the lease could have expired.

        Args:
            out_dir: The output directory.
        """
        self.out_dir = _path_str(out_dir, "out_dir", type(self).__name__)
        self._scanned_dirs.discard(self.out_dir)
        self._scan(self.out_dir)

    def finalize(self) -> None:  # noqa: B027 -- a no-op unless overridden
        """Wait for pending writes and release resources (a no-op here)."""

    def save(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        savefun: SaveFun | None,
        append: bool,
        **savefun_kwargs: Any,
    ) -> None:
        """Write ``savefun(target, fileobj, **savefun_kwargs)`` to ``out_dir/filename`` now.

        The write is atomic: a temporary file ``.{filename}.tmp-...`` in the
        same directory receives the data, is flushed and fsync'ed, then renamed
        over the destination, and the directory is fsync'ed. With ``append``,
        the current content is copied to the temporary file before the new
        data, so a crash never truncates the file. If ``savefun`` raises, the
        destination is untouched, the temporary file removed, and the error
        propagates. Post-save hooks run after a successful write. The temporary's
        lease (:func:`hold_lease`) is held during the write, so that other hosts
        sharing the directory can tell it from an abandoned one.

        Args:
            filename: File name relative to ``out_dir``.
            out_dir: Output directory; created if missing.
            target: The object to save.
            savefun: Called as ``savefun(target, fileobj, **savefun_kwargs)``;
                ``torch.save`` when ``None``.
            append: Keep the current content and add the new data after it.
            **savefun_kwargs: Extra keyword arguments of ``savefun``.
        """
        fun = resolve_savefun(savefun, type(self).__name__)
        path = self._destination(filename, out_dir)
        self._scan(os.path.dirname(path))
        write_atomic(self.fs, path, target, fun, append, savefun_kwargs)
        self._run_post_save_hooks(path)

    @property
    def writes_in_place(self) -> bool:
        """Whether :meth:`write_in_place` is available (``False`` unless a subclass says so).

        Only a synchronous writer on the local filesystem can write into a file
        in place; :class:`SimpleWriter` does (when its ``fs`` is the
        :class:`LocalFileSystem` and its ``__call__`` is not overridden).
        """
        return False

    def write_in_place(
        self, filename: str, out_dir: str, data: bytes, *, offset: int | None = None
    ) -> int:
        """Write ``data`` into ``out_dir/filename`` at ``offset`` now, without a rename.

        The cost depends on ``len(data)`` only: earlier content is neither read
        nor rewritten. The file is created if missing and cut right after
        ``data`` when it was longer. This is not atomic like :meth:`save`: it
        survives a killed process once it returns (``pwrite``, no buffer), but
        a kill during the call may leave a prefix of ``data``, and without an
        fsync a power loss may lose recent writes. Callers make their records
        recognisable and pass ``offset`` to cut off a torn tail (``LogReport``
        does). Post-save hooks run after the write.

        Args:
            filename: File name relative to ``out_dir``.
            out_dir: Output directory; created if missing.
            data: The bytes to write.
            offset: Where to write them; the end of the file when ``None`` (one
                ``O_APPEND`` write; the file is then never cut).

        Returns:
            The offset just after ``data``.

        Raises:
            TypeError: The writer does not write in place (see :attr:`writes_in_place`).
        """
        if not self.writes_in_place:
            message = (
                f"{type(self).__name__} does not write in place (writes_in_place is False); "
                "use writer(filename, out_dir, target, append=True)"
            )
            raise TypeError(message)
        path = self._destination(filename, out_dir)
        directory = os.path.dirname(path)
        self._scan(directory)
        try:
            end = write_in_place(path, data, offset)
        except FileNotFoundError:
            if not directory:
                raise
            self.fs.makedirs(directory, exist_ok=True)
            end = write_in_place(path, data, offset)
        self._run_post_save_hooks(path)
        return end

    def add_post_save_hook(self, hook: PostSaveHook) -> None:
        """Call ``hook(path)`` after each completed write of this writer.

        The hook runs once the file is complete on disk: in the writing thread
        for :class:`SimpleWriter`, :class:`ThreadWriter` and
        :class:`ThreadQueueWriter`, and in the calling process when a process
        writer's write is collected (next call or :meth:`finalize`). An
        extension that deletes old snapshots registers its cleanup here so it
        never removes the previous file before the new one is complete. An
        exception raised by a hook is reported like a failed write.

        Args:
            hook: Callable taking the path of the written file.
        """
        if not callable(hook):
            message = f"{type(self).__name__}: a post-save hook must be callable, got {hook!r}"
            raise TypeError(message)
        self._post_save_hooks.append(hook)

    def remove_post_save_hook(self, hook: PostSaveHook) -> None:
        """Stop calling ``hook`` after writes; undoes one :meth:`add_post_save_hook`.

        An extension that registered a hook on a writer it does not own removes it when
        it is done (a snapshot extension, in its ``finalize``), so that a writer reused
        by later extensions or runs neither keeps the old one alive nor runs it. A write
        already in progress in another thread may still call it once.

        Args:
            hook: The hook given to :meth:`add_post_save_hook` (or an equal one, such as
                the same bound method); added twice, it is removed once.

        Raises:
            ValueError: ``hook`` is not registered; the message names it.
        """
        try:
            self._post_save_hooks.remove(hook)
        except ValueError:
            message = (
                f"{type(self).__name__}: the post-save hook {hook!r} is not registered "
                f"(registered: {self._post_save_hooks!r})"
            )
            raise ValueError(message) from None

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finalize()

    # -- helpers for subclasses -------------------------------------------------

    def _destination(self, filename: str, out_dir: str) -> str:
        owner = type(self).__name__
        name = _path_str(filename, "filename", owner)
        if not name:
            message = f"{owner}: filename must not be empty"
            raise ValueError(message)
        directory = _path_str(out_dir, "out_dir", owner)
        return os.path.join(directory, name) if directory else name

    def _scan(self, directory: str) -> None:
        # Once per directory and writer: remove abandoned temporaries. Again once a
        # temporary kept for its lease could have expired (another host's killed job).
        if directory in self._scanned_dirs:
            due = self._rescan_at.get(directory)
            if due is None or time.monotonic() < due:
                return
        self._scanned_dirs.add(directory)
        # Files only: a temporary directory is a sharded snapshot's, which recovers what a
        # killed commit left in one before removing it.
        recheck_in = scan_stale_temporaries(self.fs, directory, directories=False).recheck_in
        if recheck_in is None:
            self._rescan_at.pop(directory, None)
        else:
            self._rescan_at[directory] = time.monotonic() + max(recheck_in, 1.0)

    def _run_post_save_hooks(self, path: str) -> None:
        # A copy: a hook may be removed by another thread while a write runs them.
        for hook in tuple(self._post_save_hooks):
            hook(path)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_scanned_dirs"] = set()
        state["_rescan_at"] = {}
        return state
