"""Crash-safe file replacement: temporary file, fsync, rename, directory fsync.

A write goes to ``.{name}.tmp-{host}-{pid}-{random}`` next to the destination,
is flushed and fsync'ed, renamed over the destination, and the directory is
fsync'ed. At every instant the destination is either absent (before its first
write), the previous complete file, or the new complete file. The leading dot
and the ``.tmp-`` marker keep temporaries out of the way of code listing the
output directory. The write holds a lease on its temporary (``_lease.py``), so
that a temporary left by a killed process is removed by the next writer that
scans the directory once provably abandoned, on any host (``_cleanup.py``).
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable, Mapping
from typing import IO, Any

from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._lease import hold_lease
from pytorch_pfn_extras.writing._names import temporary_name

__all__ = [
    "append_bytes",
    "save_to_bytes",
    "write_atomic",
    "write_in_place",
]

SaveFun = Callable[..., Any]

_COPY_CHUNK = 1 << 20


def _sync_file(fs: FileSystem, fileobj: IO[Any]) -> None:
    fsync = getattr(fs, "fsync", None)
    if fsync is not None:
        fsync(fileobj)
        return
    try:
        fd = fileobj.fileno()
    except (AttributeError, OSError, ValueError):  # in-memory or remote file objects
        return
    os.fsync(fd)


def _sync_dir(fs: FileSystem, directory: str) -> None:
    fsync_dir = getattr(fs, "fsync_dir", None)
    if fsync_dir is not None:
        fsync_dir(directory or ".")


def _discard(fs: FileSystem, path: str) -> None:
    try:
        fs.remove(path)
    except OSError:
        pass


def _check_open(fileobj: IO[Any], savefun: SaveFun) -> None:
    if fileobj.closed:
        message = (
            f"savefun {savefun!r} closed the file object it was given; it must "
            "only write to it (the writer flushes, syncs and closes it)"
        )
        raise ValueError(message)


def save_to_bytes(
    target: Any, savefun: SaveFun, savefun_kwargs: Mapping[str, Any] | None = None
) -> bytes:
    """The bytes ``savefun(target, fileobj, **savefun_kwargs)`` writes, from a memory buffer."""
    buffer = io.BytesIO()
    savefun(target, buffer, **(savefun_kwargs or {}))
    _check_open(buffer, savefun)
    return buffer.getvalue()


def write_atomic(
    fs: FileSystem,
    path: str,
    target: Any,
    savefun: SaveFun,
    append: bool = False,
    savefun_kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Write ``savefun(target, fileobj, **savefun_kwargs)`` to ``path`` atomically.

    With ``append``, the current content of ``path`` is copied to the
    temporary file first, so the result is the old content followed by the new
    data, and a crash leaves the old content intact. The temporary's lease
    (:func:`hold_lease`) is held from before its creation until after its rename;
    the directory is created if missing.
    """
    directory, base = os.path.split(path)
    if not base:
        message = f"a writer needs a file name, got the directory path {path!r}"
        raise ValueError(message)
    tmp = os.path.join(directory, temporary_name(base))
    with hold_lease(fs, tmp):
        fileobj = fs.open(tmp, "wb")
        try:
            try:
                if append and fs.exists(path):
                    with fs.open(path, "rb") as old:
                        shutil.copyfileobj(old, fileobj, _COPY_CHUNK)
                savefun(target, fileobj, **(savefun_kwargs or {}))
                _check_open(fileobj, savefun)
                fileobj.flush()
                _sync_file(fs, fileobj)
            finally:
                fileobj.close()
            fs.rename(tmp, path)
        except BaseException:
            _discard(fs, tmp)
            raise
    _sync_dir(fs, directory)


def write_in_place(path: str, data: bytes, offset: int | None = None) -> int:
    """Write ``data`` into the local file ``path`` at ``offset`` (its end when ``None``).

    The file is created if missing and truncated right after ``data`` when it
    was longer, so ``offset`` also cuts off a torn or obsolete tail. The bytes
    before ``offset`` are never read nor rewritten: the cost depends on
    ``len(data)`` only. ``data`` is written with ``pwrite`` (no user-space
    buffer), so once this returns it survives the death of the process; it is
    not fsync'ed, so a power loss may lose it. A process killed during the
    call may leave a prefix of ``data`` (a torn tail) that the next writer must
    cut off by passing ``offset``.

    Returns:
        The offset just after ``data`` (the new size of the file).
    """
    if offset is None:
        return append_bytes(path, data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        end = offset
        while view:  # pwrite may write less than asked (large data, signals)
            written = os.pwrite(fd, view, end)
            view = view[written:]
            end += written
        if os.fstat(fd).st_size > end:
            os.ftruncate(fd, end)
    finally:
        os.close(fd)
    return end


def append_bytes(path: str, data: bytes) -> int:
    """Append ``data`` to the local file ``path`` (created if missing) with one ``write``.

    The file is opened with ``O_APPEND``, so the data lands at the end of the file
    even if another process appended since. Earlier bytes are never read nor
    rewritten. Once this returns the data survives the death of the process (no
    user-space buffer); it is not fsync'ed, so a power loss may lose it. A process
    killed during the call may leave a prefix of ``data`` at the end of the file.

    Returns:
        The offset just after ``data`` (the size of the file then).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        view = memoryview(data)
        while view:  # one write in practice; more only if it is cut short (signals, full disk)
            view = view[os.write(fd, view) :]
        return os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
