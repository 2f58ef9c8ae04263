"""The filesystem contract seen by writers, and the local implementation."""

from __future__ import annotations

import os
from typing import IO, Any, Protocol, runtime_checkable

__all__ = ["FileSystem", "LocalFileSystem"]


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
    :class:`LocalFileSystem` has both.
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

    Example:
        >>> fs = LocalFileSystem()
        >>> fs.makedirs("result", exist_ok=True)
    """

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
