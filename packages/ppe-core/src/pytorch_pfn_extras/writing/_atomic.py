"""Crash-safe file replacement: temporary file, fsync, rename, directory fsync.

A write goes to ``.{name}.tmp-{host}-{pid}-{random}`` next to the destination,
is flushed and fsync'ed, renamed over the destination, and the directory is
fsync'ed. At every instant the destination is either absent (before its first
write), the previous complete file, or the new complete file. The leading dot
and the ``.tmp-`` marker keep temporaries out of the way of code listing the
output directory; a temporary left by a killed process is removed by the next
writer that scans the directory (only when its process is gone).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import zlib
from collections.abc import Callable, Mapping
from typing import IO, Any

from pytorch_pfn_extras.writing._fs import FileSystem

__all__ = [
    "append_bytes",
    "is_temporary_file",
    "remove_stale_temporaries",
    "save_to_bytes",
    "temporary_name",
    "write_atomic",
    "write_in_place",
]

SaveFun = Callable[..., Any]

_TEMP_RE = re.compile(r"^\.(?P<base>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{8}$")
_COPY_CHUNK = 1 << 20
_host_tag_cache: list[str] = []


def _host_tag() -> str:
    # Identifies this host and PID namespace, so that a PID in a temporary name
    # is only ever checked on the machine (and container) that created it.
    if not _host_tag_cache:
        try:
            namespace = str(os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            namespace = ""
        key = f"{socket.gethostname()}:{namespace}".encode()
        _host_tag_cache.append(f"{zlib.crc32(key):08x}")
    return _host_tag_cache[0]


def temporary_name(base: str) -> str:
    """A fresh temporary name for the file (or directory) named ``base``, as writers use.

    The name is ``.{base}.tmp-{host}-{pid}-{random}``: :func:`is_temporary_file` recognises
    it, and :func:`remove_stale_temporaries` removes it once the process that made it is gone.
    Code that writes a file or a directory of its own next to a writer's output (write under
    this name, then rename) gets the same treatment for its leftovers.

    Args:
        base: The destination's file name, without its directory.

    Returns:
        A file name, without a directory; a new one at each call.

    Example:
        >>> name = temporary_name("snapshot_iter_10")
        >>> name.startswith(".snapshot_iter_10.tmp-"), is_temporary_file(name)
        (True, True)
    """
    return f".{base}.tmp-{_host_tag()}-{os.getpid()}-{os.urandom(4).hex()}"


def is_temporary_file(name: str) -> bool:
    """Whether ``name`` (a file name or path) is a writer's temporary file.

    Code that scans an output directory (for example to find the newest
    snapshot) must skip these: they may be incomplete.

    Args:
        name: A file name, or a path whose last component is checked.

    Returns:
        ``True`` for names of the form ``.{filename}.tmp-...`` written by a writer.

    Example:
        >>> is_temporary_file(".snapshot_iter_10.tmp-1a2b3c4d-4242-0badc0de")
        True
        >>> is_temporary_file("snapshot_iter_10")
        False
    """
    return _TEMP_RE.match(os.path.basename(name)) is not None


def _process_is_gone(pid: int) -> bool:
    if os.name != "posix":  # pragma: no cover -- no cheap liveness check; keep the file
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, owned by someone else
        return False
    return False


def remove_stale_temporaries(fs: FileSystem, directory: str) -> list[str]:
    """Remove temporaries in ``directory`` left by processes that no longer exist.

    Only temporaries created on this host (and PID namespace) by a process that
    has exited are removed; those of live writers, of this process, and of other
    hosts sharing the directory are kept (they never disturb a write). Writers
    run this on their output directory; call it for a directory that only your
    own code writes into with :func:`temporary_name`.

    A stale temporary that is a directory (a snapshot written as a directory
    under a name from :func:`temporary_name`) is removed with
    ``fs.remove_tree`` when ``fs`` has it, and left alone otherwise; failing to
    remove one is not an error (the next scan tries again).

    Args:
        fs: The file system: a writer's ``fs``, or :class:`LocalFileSystem` for
            the local disk.
        directory: The directory to scan (``""`` for the current one); a
            missing directory has nothing to remove.

    Returns:
        The paths removed (``directory`` joined with each name).
    """
    try:
        names = fs.listdir(directory or ".")
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: list[str] = []
    host = _host_tag()
    own_pid = os.getpid()
    for name in names:
        if not name.startswith("."):
            continue
        match = _TEMP_RE.match(name)
        if match is None or match["host"] != host:
            continue
        pid = int(match["pid"])
        if pid == own_pid or not _process_is_gone(pid):
            continue
        path = os.path.join(directory, name)
        if _remove_stale(fs, path):
            removed.append(path)
    return removed


def _remove_stale(fs: FileSystem, path: str) -> bool:
    isdir = getattr(fs, "isdir", None)
    if not (callable(isdir) and isdir(path)):
        try:
            fs.remove(path)
        except FileNotFoundError:  # another writer cleaned it first
            return False
        except IsADirectoryError:  # a file system without isdir
            pass
        else:
            return True
    remove_tree = getattr(fs, "remove_tree", None)
    if not callable(remove_tree):
        return False
    try:
        remove_tree(path)
    except Exception:  # e.g. a file in it owned by someone else: left for the next scan
        return False
    return True


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


def _open_temporary(fs: FileSystem, directory: str, base: str) -> tuple[str, IO[Any]]:
    tmp = os.path.join(directory, temporary_name(base))
    try:
        return tmp, fs.open(tmp, "wb")
    except FileNotFoundError:
        if not directory:
            raise
    fs.makedirs(directory, exist_ok=True)
    return tmp, fs.open(tmp, "wb")


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
    data, and a crash leaves the old content intact.
    """
    directory, base = os.path.split(path)
    if not base:
        message = f"a writer needs a file name, got the directory path {path!r}"
        raise ValueError(message)
    tmp, fileobj = _open_temporary(fs, directory, base)
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
