"""The operations of the fault-injection harness: counted, and failed or killed at one index.

Loaded by ``_fault_harness.py`` in the forked children of ``test_fault_injection.py``. A
child counts every file-system operation of the code under test on the paths below its case
directory, in order, and injects one fault at the operation of a given index: ``OSError(EIO)``
or ``OSError(ENOSPC)`` raised instead of the operation, or the process ended right there with
``os._exit`` (as by ``SIGKILL``: no buffer flushed, no ``finally`` run). It reports each
operation, its outcome, and each commit of a snapshot to an events file, written without a
buffer so that the records of a killed child are complete.

Two interposers count and fail operations:

- :class:`OsInterposer` replaces the primitives of ``os``, ``io`` and ``builtins`` (``open``,
  ``os.open``/``write``/``pwrite``/``fsync``/``ftruncate``/``replace``/``rename``/``unlink``/
  ``rmdir``/``mkdir``/``listdir``/``scandir``/``symlink``/``sendfile``, and the ``write``,
  ``flush``, ``close`` and ``read`` calls of the file objects that ``open`` returns): what
  Python code composes from them (``os.makedirs``, ``shutil.rmtree``, ``pathlib``,
  ``torch.distributed.checkpoint``'s writer and reader, ``torch.save`` into a file object) is
  counted operation by operation. Queries (``os.stat`` and ``os.path``'s) are not counted: an
  error there reads as "missing" to ``os.path.exists``. A write killed or refused for space
  (``ENOSPC``) by :func:`os.write`/:func:`os.pwrite` writes half of its bytes first (a torn
  write).
- :class:`CountingFileSystem` wraps a writer's file system (pfio on S3): every method call.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import io
import os
import pickle
import stat
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

__all__ = [
    "FAULTS",
    "KILLED",
    "CountingFileSystem",
    "Counter",
    "Events",
    "Fault",
    "OsInterposer",
    "bytes_digest",
    "local_digest",
    "read_events",
]

FAULTS = ("EIO", "ENOSPC", "kill")
"""The faults injected at each operation."""

KILLED = 77
"""The exit status of a child ended by a ``kill`` fault."""

_ERRNO = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}

# The primitives as they were before any interposer: the harness's own I/O goes through these.
_open = io.open
_os_open = os.open
_os_write = os.write
_os_close = os.close
_os_scandir = os.scandir
_os_readlink = os.readlink
_os_sendfile = os.sendfile


class Fault(NamedTuple):
    """A fault injected at the operation ``at`` (counted from 0) of a child."""

    at: int
    kind: str  # one of FAULTS


class Events:
    """The records a child reports, kept in memory and appended to a file by :meth:`flush`
    (which a fault calls before it ends the process, and the child when it ends).

    Args:
        path: The events file (created).
    """

    def __init__(self, path: str) -> None:
        self._fd = _os_open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._pending = bytearray()

    def emit(self, *record: Any) -> None:
        """Add one record (a tuple whose first item names its kind)."""
        data = pickle.dumps(record)
        with self._lock:
            self._pending += len(data).to_bytes(4, "little") + data
            if len(self._pending) > 1 << 16:
                self._write()

    def flush(self) -> None:
        """Write the records added so far."""
        with self._lock:
            self._write()

    def _write(self) -> None:
        view = memoryview(bytes(self._pending))
        self._pending.clear()
        while view:
            view = view[_os_write(self._fd, view) :]


def read_events(path: str) -> list[tuple[Any, ...]]:
    """The records of an events file (those complete when its writer died)."""
    try:
        with _open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    records = []
    at = 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at : at + 4], "little")
        if at + 4 + size > len(data):
            break
        records.append(pickle.loads(data[at + 4 : at + 4 + size]))
        at += 4 + size
    return records


class Counter:
    """Counts the operations of a child and injects its fault.

    Operations of every thread share one count (the harness checks that a faulted run
    reached the same operation as the reference run at the fault's index). An operation
    that the harness or another counted operation performs is not counted again.

    Args:
        events: Where each operation and its outcome are reported.
        fault: The fault to inject, or ``None`` (the reference run).
        is_snapshot: Whether a path (relative to the case) names a committed snapshot: a
            rename onto such a path is reported as a commit, with the digest of what it holds.
        digest: The digest of a path (relative to the case).
        report_ops: Report every operation (the reference run); else only the fault and
            the commits.
    """

    def __init__(
        self,
        events: Events,
        fault: Fault | None,
        is_snapshot: Callable[[str], bool],
        digest: Callable[[str], str | None],
        *,
        report_ops: bool = True,
    ) -> None:
        self.events = events
        self.fault = fault
        self.report_ops = report_ops
        self.count = 0
        self._is_snapshot = is_snapshot
        self._digest = digest
        self._lock = threading.RLock()
        self._local = threading.local()

    @property
    def busy(self) -> bool:
        """Whether this thread is inside a counted operation (or the harness's own I/O)."""
        return bool(getattr(self._local, "busy", False))

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Do the harness's own I/O: nothing inside is counted."""
        before = self.busy
        self._local.busy = True
        try:
            yield
        finally:
            self._local.busy = before

    @contextlib.contextmanager
    def operation(
        self,
        kind: str,
        *paths: str,
        name: str | None = None,
        torn: Callable[[], None] | None = None,
    ) -> Iterator[int]:
        """Count one operation on ``paths`` (relative to the case); inject the fault there.

        Args:
            kind: What the operation does (``"open:w"``, ``"write"``, ``"replace"``...).
            paths: The paths it acts on.
            name: The path an injected error names (the first of ``paths`` as the code
                under test gave it); ``paths[0]`` when ``None``.
            torn: For a write: writes part of its data, before a ``kill`` or ``ENOSPC``.

        Yields:
            The index of the operation.
        """
        with self._lock:
            index = self.count
            self.count += 1
            if self.fault is not None and index == self.fault.at:
                self._inject(index, kind, paths, name, torn)
            self._local.busy = True
            try:
                yield index
            except BaseException as error:
                if self.report_ops:
                    self.events.emit("op", index, kind, paths, type(error).__name__)
                raise
            finally:
                self._local.busy = False
            if self.report_ops:
                self.events.emit("op", index, kind, paths, "ok")

    def _inject(
        self,
        index: int,
        kind: str,
        paths: tuple[str, ...],
        name: str | None,
        torn: Callable[[], None] | None,
    ) -> None:
        assert self.fault is not None
        self.events.emit("fault", index, kind, paths, self.fault.kind)
        if torn is not None and self.fault.kind in ("kill", "ENOSPC"):
            with self.quiet():
                torn()
        if self.fault.kind == "kill":
            self.events.flush()
            os._exit(KILLED)
        code = _ERRNO[self.fault.kind]
        raise OSError(code, os.strerror(code), name if name is not None else paths[0])

    def renamed(self, index: int, destination: str) -> None:
        """Report a commit if the completed rename ``index`` made ``destination`` a snapshot."""
        if self._is_snapshot(destination):
            with self.quiet():
                self.events.emit("commit", index, destination, self._digest(destination))


def bytes_digest(data: bytes) -> str:
    """The digest :func:`local_digest` gives a file holding ``data``."""
    hasher = hashlib.sha1()
    hasher.update(b"f" + len(data).to_bytes(8, "little") + data)
    return hasher.hexdigest()


def local_digest(path: str) -> str | None:
    """A digest of what ``path`` holds on the local disk (a file's bytes, a link's target, a
    directory's names and contents, recursively), or ``None`` when it is missing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return "link:" + _os_readlink(path)
    hasher = hashlib.sha1()
    _hash_into(hasher, path, mode)
    return hasher.hexdigest()


def _hash_into(hasher: Any, path: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        hasher.update(b"d")
        with _os_scandir(path) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                hasher.update(entry.name.encode() + b"\0")
                if entry.is_symlink():
                    hasher.update(b"l" + _os_readlink(entry.path).encode() + b"\0")
                else:
                    _hash_into(hasher, entry.path, entry.stat(follow_symlinks=False).st_mode)
        hasher.update(b"\0\0")
        return
    with _open(path, "rb") as f:
        data = f.read()
    hasher.update(b"f" + len(data).to_bytes(8, "little") + data)


class _File:
    """A file object of the code under test: its writes, flushes, closes and reads count."""

    def __init__(
        self,
        counter: Counter,
        real: Any,
        path: str,
        writable: bool,
        forget: Callable[[], None] | None = None,
        name: str | None = None,
    ) -> None:
        self._counter = counter
        self._real = real
        self._path = path
        self._name = name
        self._writable = writable
        self._forget = forget

    def _op(self, kind: str) -> Any:
        if self._counter.busy:
            return contextlib.nullcontext()
        return self._counter.operation(kind, self._path, name=self._name)

    def write(self, data: Any) -> Any:
        with self._op("write"):
            return self._real.write(data)

    def writelines(self, lines: Any) -> None:
        with self._op("write"):
            self._real.writelines(lines)

    def flush(self) -> None:
        if not self._writable or self._real.closed:
            self._real.flush()
            return
        with self._op("flush"):
            self._real.flush()

    def close(self) -> None:
        if self._real.closed:
            return
        if self._forget is not None:
            self._forget()
        if not self._writable:
            self._real.close()
            return
        with self._op("close"):
            self._real.close()

    def read(self, *args: Any) -> Any:
        with self._op("read"):
            return self._real.read(*args)

    def read1(self, *args: Any) -> Any:
        with self._op("read"):
            return self._real.read1(*args)

    def readinto(self, buffer: Any) -> Any:
        with self._op("read"):
            return self._real.readinto(buffer)

    def readinto1(self, buffer: Any) -> Any:
        with self._op("read"):
            return self._real.readinto1(buffer)

    def readline(self, *args: Any) -> Any:
        with self._op("read"):
            return self._real.readline(*args)

    def readlines(self, *args: Any) -> Any:
        with self._op("read"):
            return self._real.readlines(*args)

    def __iter__(self) -> _File:
        return self

    def __next__(self) -> Any:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _no_sync(fd: int) -> None:
    """``fsync`` counted, not done: the harness kills processes, it does not cut the power, so
    what reaches the disk is what was written (and the machine's disk is shared)."""
    del fd


def _writes(mode: str) -> bool:
    return any(c in mode for c in "wax+")


def _flags_write(flags: int) -> bool:
    return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))


class OsInterposer:
    """Counts and fails the operating-system operations on the paths below ``root``.

    Args:
        root: The case directory (an absolute path, as the code under test is given it).
        counter: What counts the operations and injects the fault.

    Use as a context manager: the primitives are replaced inside, restored after (a child
    that is killed never restores them).
    """

    def __init__(self, root: str, counter: Counter) -> None:
        self.root = os.path.abspath(root)
        self.counter = counter
        self._fds: dict[int, str] = {}
        self._saved: list[tuple[Any, str, Any]] = []

    # ------------------------------------------------------------------ paths

    def relative(self, path: Any, dir_fd: int | None = None) -> str | None:
        """``path`` relative to the root, or ``None`` when it is elsewhere (or not a path)."""
        if isinstance(path, int):
            return self._fds.get(path)
        try:
            name = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        if dir_fd is not None:
            base = self._fds.get(dir_fd)
            if base is None:
                return None
            return os.path.normpath(os.path.join(base, name))
        full = os.path.abspath(name)
        if full == self.root:
            return "."
        if full.startswith(self.root + os.sep):
            return full[len(self.root) + 1 :]
        return None

    def absolute(self, relative: str) -> str:
        """The absolute path of a path relative to the root."""
        return os.path.join(self.root, relative)

    def _counted(self, *paths: Any, dir_fd: int | None = None) -> tuple[str, ...] | None:
        if self.counter.busy:
            return None
        found = tuple(self.relative(p, dir_fd) for p in paths)
        if all(p is None for p in found):
            return None
        return tuple(p if p is not None else "<outside>" for p in found)

    # ------------------------------------------------------------------ installing

    def __enter__(self) -> OsInterposer:
        replacements: list[tuple[Any, str, Any]] = [
            (builtins, "open", self._open),
            (io, "open", self._open),
            (os, "open", self._os_open),
            (os, "close", self._os_close),
            (os, "write", self._write_fd("os.write", os.write)),
            (os, "pwrite", self._write_fd("pwrite", os.pwrite)),
            (os, "sendfile", self._sendfile),
            (os, "fsync", self._on_fd("fsync", _no_sync)),
            (os, "fdatasync", self._on_fd("fsync", _no_sync)),
            (os, "ftruncate", self._on_fd("ftruncate", os.ftruncate)),
            (os, "truncate", self._on_path("truncate", os.truncate)),
            (os, "replace", self._rename("replace", os.replace)),
            (os, "rename", self._rename("rename", os.rename)),
            (os, "remove", self._on_path("unlink", os.remove)),
            (os, "unlink", self._on_path("unlink", os.unlink)),
            (os, "rmdir", self._on_path("rmdir", os.rmdir)),
            (os, "mkdir", self._on_path("mkdir", os.mkdir)),
            (os, "listdir", self._on_path("listdir", os.listdir, default=".")),
            (os, "scandir", self._on_path("scandir", os.scandir, default=".")),
            (os, "symlink", self._two_paths("symlink", os.symlink)),
            (os, "link", self._two_paths("link", os.link)),
        ]
        for owner, name, replacement in replacements:
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, replacement)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    # ------------------------------------------------------------------ replacements

    def _op(self, kind: str, *paths: str, torn: Callable[[], None] | None = None) -> Any:
        """The counted operation ``kind`` on ``paths``; an injected error names the first
        one as an absolute path, as a real error would."""
        name = self.absolute(paths[0]) if paths and paths[0] != "<outside>" else None
        return self.counter.operation(kind, *paths, name=name, torn=torn)

    def _open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        paths = None if isinstance(file, int) else self._counted(file)
        if paths is None:
            return _open(file, mode, *args, **kwargs)
        writable = _writes(mode)
        with self._op("open:w" if writable else "open:r", *paths):
            real = _open(file, mode, *args, **kwargs)
        fd = -1
        with contextlib.suppress(OSError, ValueError):
            fd = real.fileno()
            self._fds[fd] = paths[0]

        def forget() -> None:
            self._fds.pop(fd, None)

        return _File(self.counter, real, paths[0], writable, forget, self.absolute(paths[0]))

    def _os_open(
        self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        paths = self._counted(path, dir_fd=dir_fd)
        if paths is None:
            fd = _os_open(path, flags, mode, dir_fd=dir_fd)
        else:
            with self._op("open:w" if _flags_write(flags) else "open:r", *paths):
                fd = _os_open(path, flags, mode, dir_fd=dir_fd)
        relative = self.relative(path, dir_fd)
        if relative is not None:
            self._fds[fd] = relative
        return fd

    def _os_close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        _os_close(fd)

    def _write_fd(self, kind: str, real: Callable[..., int]) -> Callable[..., int]:
        def write(fd: int, data: Any, *args: Any) -> int:
            path = None if self.counter.busy else self._fds.get(fd)
            if path is None:
                return real(fd, data, *args)
            view = memoryview(data)

            def torn() -> None:
                real(fd, view[: len(view) // 2], *args)

            with self._op(kind, path, torn=torn if len(view) > 1 else None):
                return real(fd, data, *args)

        return write

    def _sendfile(self, out_fd: int, in_fd: int, *args: Any) -> int:
        path = None if self.counter.busy else self._fds.get(out_fd)
        if path is None:
            return _os_sendfile(out_fd, in_fd, *args)
        with self._op("sendfile", path):
            return _os_sendfile(out_fd, in_fd, *args)

    def _on_fd(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(fd: int, *args: Any) -> Any:
            path = None if self.counter.busy else self._fds.get(fd)
            if path is None:
                return real(fd, *args)
            with self._op(kind, path):
                return real(fd, *args)

        return call

    def _on_path(
        self, kind: str, real: Callable[..., Any], default: str | None = None
    ) -> Callable[..., Any]:
        def call(path: Any = default, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
            if dir_fd is not None:
                kwargs["dir_fd"] = dir_fd
            if path is None:
                return real(*args, **kwargs)
            paths = self._counted(path, dir_fd=dir_fd)
            if paths is None:
                return real(path, *args, **kwargs)
            with self._op(kind, *paths):
                return real(path, *args, **kwargs)

        return call

    def _rename(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(src: Any, dst: Any, **kwargs: Any) -> Any:
            paths = self._counted(src, dst)
            if paths is None:
                return real(src, dst, **kwargs)
            with self._op(kind, *paths) as index:
                result = real(src, dst, **kwargs)
            if paths[1] != "<outside>":
                self.counter.renamed(index, paths[1])
            return result

        return call

    def _two_paths(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            paths = self._counted(dst)
            if paths is None:
                return real(src, dst, *args, **kwargs)
            with self._op(kind, *paths):
                return real(src, dst, *args, **kwargs)

        return call


class CountingFileSystem:
    """A writer's file system (the :class:`~pytorch_pfn_extras.writing.FileSystem` methods)
    whose every method call is counted, and failed or killed at the fault's index.

    Args:
        inner: The file system wrapped (``writing.PfioFileSystem(pfio.v2.from_url(...))``).
        counter: What counts the calls and injects the fault.
        prefix: The case's prefix in ``inner`` (stripped from the paths reported).
        url: The URL of the root of ``inner`` (``s3://bucket``): an injected error names the
            path under it, as the client's own errors do.

    Attributes:
        local_root: ``None``: paths are not local ones.
    """

    local_root: str | None = None

    def __init__(self, inner: Any, counter: Counter, prefix: str, url: str) -> None:
        self.inner = inner
        self.counter = counter
        self._prefix = prefix.rstrip("/") + "/"
        self._url = url.rstrip("/")

    def _relative(self, path: str) -> str:
        return path[len(self._prefix) :] if path.startswith(self._prefix) else path

    def _call(self, kind: str, *paths: str) -> Any:
        if self.counter.busy:
            return contextlib.nullcontext(-1)
        relative = (self._relative(p) for p in paths)
        return self.counter.operation(kind, *relative, name=f"{self._url}/{paths[0]}")

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        writable = _writes(mode)
        with self._call("open:w" if writable else "open:r", path):
            real = self.inner.open(path, mode)
        relative = self._relative(path)
        name = f"{self._url}/{path}"
        return _File(self.counter, real, relative, writable, None, name)  # type: ignore[return-value]

    def exists(self, path: str) -> bool:
        with self._call("exists", path):
            return bool(self.inner.exists(path))

    def isdir(self, path: str) -> bool:
        with self._call("isdir", path):
            return bool(self.inner.isdir(path))

    def size(self, path: str) -> int:
        with self._call("size", path):
            return int(self.inner.size(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        with self._call("makedirs", path):
            self.inner.makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        with self._call("rename", src, dst) as index:
            self.inner.rename(src, dst)
        if index >= 0:
            self.counter.renamed(index, self._relative(dst))

    def remove(self, path: str) -> None:
        with self._call("unlink", path):
            self.inner.remove(path)

    def remove_tree(self, path: str) -> None:
        with self._call("remove_tree", path):
            self.inner.remove_tree(path)

    def listdir(self, path: str) -> list[str]:
        with self._call("listdir", path):
            return list(self.inner.listdir(path))

    def fsync(self, fileobj: Any) -> None:
        with self._call("fsync", getattr(fileobj, "_path", "?")):
            self.inner.fsync(getattr(fileobj, "_real", fileobj))

    def fsync_dir(self, path: str) -> None:
        with self._call("fsync_dir", path):
            self.inner.fsync_dir(path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "counter"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CountingFileSystem({self.inner!r})"
