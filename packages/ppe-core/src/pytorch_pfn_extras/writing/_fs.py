"""The filesystem contract seen by writers and the local implementation.

Writers accept three kinds of ``fs``: an object with the :class:`FileSystem` methods (such
as :class:`LocalFileSystem`), a pfio file system and an fsspec one, which
``_adapters.py`` wraps in adapters with the same methods.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from typing import IO, Any, Protocol, runtime_checkable

__all__ = ["FileSystem", "LocalFileSystem", "check_tree_path"]


@runtime_checkable
class FileSystem(Protocol):
    """The POSIX-like file API a writer needs.

    Any object with these methods can be passed as ``fs=`` to a writer (for
    example a client of a remote store). Paths are ``/``-separated strings.
    ``open(path, "wb")`` must return a binary file object with ``write`` and
    ``flush``; when it also has a working ``fileno()``, the writer calls
    ``os.fsync`` on it before renaming.

    Two optional methods refine durability: ``fsync(fileobj)`` replaces the
    ``os.fsync`` call above, and ``fsync_dir(path)`` makes a rename inside
    ``path`` durable (without it, the directory is not synced).
    :class:`LocalFileSystem` has both. An optional ``modified(path)``, the
    modification time of a file in seconds since the epoch as the file system
    stamps it, lets :func:`remove_stale_temporaries` tell when the lease of
    another host's temporary expired (without it, such temporaries are kept).
    """

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        """Open ``path`` with a ``open()`` mode such as ``"rb"`` or ``"wb"``."""
        ...

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        ...

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create ``path`` and its missing parents."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, atomically replacing ``dst`` if it exists."""
        ...

    def remove(self, path: str) -> None:
        """Remove the file ``path``."""
        ...

    def listdir(self, path: str) -> list[str]:
        """Names of the entries of the directory ``path``."""
        ...


class LocalFileSystem:
    """The local filesystem, the default ``fs`` of every writer.

    ``rename`` is ``os.replace`` (atomic on POSIX); ``fsync`` and
    ``fsync_dir`` make a completed write survive a power loss.

    Attributes:
        local_root: ``""``: paths are local paths, used as given (relative
            ones to the current directory).

    Example:
        >>> fs = LocalFileSystem()
        >>> fs.makedirs("result", exist_ok=True)
    """

    local_root: str | None = ""

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        """Open a local file (``open(path, mode)``)."""
        return open(path, mode)

    def exists(self, path: str) -> bool:
        """Whether the local path exists."""
        return os.path.exists(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create a local directory and its parents."""
        os.makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        """Atomically rename ``src`` over ``dst`` (``os.replace``)."""
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        """Remove a local file."""
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        """Names of the entries of a local directory."""
        return os.listdir(path)

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (``False`` when it does not exist)."""
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        """The size of the file ``path`` in bytes.

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        return os.path.getsize(path)

    def modified(self, path: str) -> float:
        """The modification time of ``path`` in seconds since the epoch (``st_mtime``).

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        return os.stat(path).st_mtime

    def remove_tree(self, path: str) -> None:
        """Remove the directory ``path`` and everything under it; nothing if it is missing.

        Raises:
            ValueError: ``path`` is empty or ``"."`` (the current directory).
            NotADirectoryError: ``path`` is a file.
        """
        check_tree_path(path, self)
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass

    def fsync(self, fileobj: IO[Any]) -> None:
        """Flush ``fileobj`` to the disk (``os.fsync`` on its descriptor)."""
        os.fsync(fileobj.fileno())

    def fsync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` (renames, creations) durable."""
        if os.name != "posix":  # pragma: no cover -- directories cannot be opened on Windows
            return
        fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return "LocalFileSystem()"

    def __eq__(self, other: object) -> bool:
        return type(other) is LocalFileSystem

    def __hash__(self) -> int:
        return hash(LocalFileSystem)


def check_tree_path(path: str, fs: object) -> None:
    """Raise a ``ValueError`` naming ``fs`` when ``path`` is its root (``remove_tree``'s guard)."""
    # ``remove_tree("")`` would empty the whole root of the file system.
    if posixpath.normpath(path or ".") in (".", "/"):
        message = f"{fs!r}: remove_tree needs a directory below the root, got {path!r}"
        raise ValueError(message)
