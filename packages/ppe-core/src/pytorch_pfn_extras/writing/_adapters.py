"""Adapters: pfio and fsspec file systems seen as a :class:`FileSystem`, and the choice.

Writers accept three kinds of ``fs``: an object with the :class:`FileSystem` methods (such
as :class:`LocalFileSystem`), a pfio file system (``pfio.v2.from_url(...)``, wrapped in
:class:`PfioFileSystem`) and an fsspec file system (``s3fs.S3FileSystem(...)``,
``fsspec.filesystem("file")``, wrapped in :class:`FsspecFileSystem`). Neither pfio nor
fsspec is imported here: a pfio object is recognised by its methods, an fsspec one only
once the user has imported fsspec.
"""

from __future__ import annotations

import io
import os
import posixpath
import sys
from typing import IO, Any

from pytorch_pfn_extras.writing._fs import FileSystem, LocalFileSystem, check_tree_path

__all__ = ["FsspecFileSystem", "PfioFileSystem", "adapt_file_system"]


def _fsync_if_local(fileobj: IO[Any]) -> None:
    # Remote file objects have no descriptor (AttributeError, io.UnsupportedOperation).
    try:
        fd = fileobj.fileno()
    except (AttributeError, OSError, ValueError):
        return
    os.fsync(fd)


class _Adapter:
    """Shared part of the adapters: ``wrapped`` and delegation of other attributes."""

    wrapped: Any

    def __init__(self, fs: Any) -> None:
        self.wrapped = fs

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes the adapter lacks. Dunders and ``wrapped`` itself are
        # not delegated, so that copying and unpickling (which look them up before
        # ``wrapped`` is set) do not recurse.
        if name.startswith("__") or name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def fsync(self, fileobj: IO[Any]) -> None:
        """``os.fsync`` a local file object; nothing for a remote one (it has no descriptor)."""
        _fsync_if_local(fileobj)

    def fsync_dir(self, path: str) -> None:
        """Sync the directory ``path`` on a local file system; nothing on object storage."""
        root = self.local_root
        if root is not None:
            LocalFileSystem().fsync_dir(os.path.join(root, path) if root else path)

    @property
    def local_root(self) -> str | None:
        """Overridden by each adapter (see there)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"


class PfioFileSystem(_Adapter):
    """A pfio file system (``pfio.v2.from_url(...)``) seen as a :class:`FileSystem`.

    Writers wrap a pfio ``fs`` in this class themselves (``writer.fs`` is then the
    adapter; the pfio object is ``writer.fs.wrapped``). Paths are relative to the
    pfio file system's root (its ``cwd``), as in pfio. On S3, ``rename`` copies
    then deletes one object (readers see the old or the new object, never a
    partial one) and directories are key prefixes: ``makedirs`` does nothing, and
    ``listdir`` of a missing directory is empty. Attributes the adapter lacks are
    those of the pfio object (``writer.fs.cwd``).

    Args:
        fs: A pfio ``FS`` (``Local``, ``S3``, ...).

    Attributes:
        wrapped: The pfio file system.

    Example:
        >>> import pfio
        >>> fs = pfio.v2.from_url("s3://bucket/experiment")
        >>> writer = writing.SimpleWriter(fs=fs)  # writer.fs is PfioFileSystem(fs)
        >>> writer("snapshot", "out", model.state_dict())  # s3://bucket/experiment/out/snapshot
    """

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        """Open ``path`` (pfio's ``open``)."""
        return self.wrapped.open(path, mode)  # type: ignore[no-any-return]

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a file, or a directory / key prefix)."""
        return bool(self.wrapped.exists(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create a directory and its parents (nothing to do on S3)."""
        self.wrapped.makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        """Rename the file ``src`` to ``dst``, replacing it."""
        self.wrapped.rename(src, dst)

    def remove(self, path: str) -> None:
        """Remove the file ``path``."""
        self.wrapped.remove(path)

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path`` (pfio's ``list`` without the ``/`` of subdirectories).

        Raises:
            FileNotFoundError: ``path`` is missing on a local file system (on S3 the
                list is empty).
        """
        names = (name.rstrip("/") for name in self.wrapped.list(path))
        # "" is the marker object of ``path`` itself; on S3 an object "x" and a prefix "x/"
        # are both listed, as one name here.
        return list(dict.fromkeys(name for name in names if name))

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (on S3: a prefix of some key)."""
        return bool(self.wrapped.isdir(path))

    def size(self, path: str) -> int:
        """The size of the file ``path`` in bytes (pfio's ``stat(path).size``).

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        return int(self.wrapped.stat(path).size)

    def modified(self, path: str) -> float:
        """The modification time of the file ``path`` in seconds since the epoch.

        pfio's ``stat(path).last_modified``: on S3, the object's ``LastModified``, as
        the store stamped it (one-second resolution).

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        return float(self.wrapped.stat(path).last_modified)

    def remove_tree(self, path: str) -> None:
        """Remove the directory ``path`` and everything under it; nothing if it is missing.

        pfio's recursive ``remove`` where the backend has one; on S3, which has not,
        each object under ``path/`` is removed (except empty ``folder/`` marker
        objects, which some tools create and pfio cannot remove).

        Raises:
            ValueError: ``path`` is empty or ``"."`` (the root of the file system).
        """
        check_tree_path(path, self)
        try:
            self.wrapped.remove(path, recursive=True)
            return
        except FileNotFoundError:
            return
        except io.UnsupportedOperation:
            pass
        for name in list(self.wrapped.list(path, recursive=True)):
            if not name or name.endswith("/"):  # marker objects of (sub)directories
                continue
            try:
                self.wrapped.remove(posixpath.join(path, name))
            except FileNotFoundError:  # removed by someone else meanwhile
                continue

    @property
    def local_root(self) -> str | None:
        """The directory paths are relative to, for pfio's local file system; else ``None``.

        That is pfio's ``cwd``, as given to pfio (relative to the current directory
        if it was). ``None`` means that paths are not local paths (S3, HDFS, ...).
        """
        local = getattr(sys.modules.get("pfio.v2"), "Local", None)
        if local is not None and isinstance(self.wrapped, local):
            return str(self.wrapped.cwd)
        return None


class FsspecFileSystem(_Adapter):
    """An fsspec file system (``s3fs.S3FileSystem(...)``, ...) seen as a :class:`FileSystem`.

    Writers wrap an fsspec ``fs`` in this class themselves (``writer.fs`` is then
    the adapter; the fsspec object is ``writer.fs.wrapped``). Paths are fsspec
    paths (``"bucket/prefix/out"`` for s3fs). ``rename`` is fsspec's ``mv`` (on S3,
    a copy of one object then a delete) and ``remove`` is ``rm_file``. fsspec's
    listing cache is dropped for the path before every call that reads it
    (``open``, ``listdir``, ``exists``, ``isdir``, ``size``), so files written by
    other processes or clients are seen. An asynchronous file system (s3fs)
    cannot be used in a forked process: there (a :class:`ProcessWriter` worker),
    the adapter makes a new instance with the same options
    (``storage_args``, ``storage_options``) and uses it as ``wrapped``.
    Attributes the adapter lacks are those of the fsspec object.

    Args:
        fs: An ``fsspec.AbstractFileSystem``.

    Attributes:
        wrapped: The fsspec file system.

    Example:
        >>> import s3fs
        >>> fs = s3fs.S3FileSystem(endpoint_url="http://127.0.0.1:9000")
        >>> writer = writing.SimpleWriter(fs=fs)  # writer.fs is FsspecFileSystem(fs)
        >>> writer("snapshot", "bucket/experiment/out", model.state_dict())
    """

    def __init__(self, fs: Any) -> None:
        super().__init__(fs)
        self._pid = os.getpid()

    def _fs(self) -> Any:
        if self._pid != os.getpid():
            # s3fs raises "This class is not fork-safe" in a forked child.
            if getattr(self.wrapped, "async_impl", False):
                # The event loop thread of fsspec is not in this process: let the new
                # instance start one (newer fsspec releases do this at fork themselves).
                asyn = sys.modules.get("fsspec.asyn")
                reset_lock = getattr(asyn, "reset_lock", None)
                if callable(reset_lock):
                    reset_lock()
                options = {**self.wrapped.storage_options, "skip_instance_cache": True}
                self.wrapped = type(self.wrapped)(*self.wrapped.storage_args, **options)
            self._pid = os.getpid()
        return self.wrapped

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        """Open ``path`` (fsspec's ``open``)."""
        fs = self._fs()
        fs.invalidate_cache(path)
        return fs.open(path, mode)  # type: ignore[no-any-return]

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        fs = self._fs()
        fs.invalidate_cache(path)
        return bool(fs.exists(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create a directory and its parents (nothing to do under an S3 bucket)."""
        self._fs().makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        """Rename the file ``src`` to ``dst``, replacing it (fsspec's ``mv``)."""
        self._fs().mv(src, dst)

    def remove(self, path: str) -> None:
        """Remove the file ``path`` (fsspec's ``rm_file``; S3 ignores a missing one)."""
        self._fs().rm_file(path)

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path`` (the last component of each path ``ls`` gives).

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        fs = self._fs()
        fs.invalidate_cache(path)
        own = posixpath.basename(path.rstrip("/"))
        names = []
        for entry in fs.ls(path, detail=False):
            name = posixpath.basename(entry.rstrip("/"))
            if not name or (entry.endswith("/") and name == own):
                continue  # the marker object of ``path`` itself
            names.append(name)
        return list(dict.fromkeys(names))  # an S3 object "x" and a prefix "x/": one name

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (on S3: a prefix of some key)."""
        fs = self._fs()
        fs.invalidate_cache(path)
        return bool(fs.isdir(path))

    def size(self, path: str) -> int:
        """The size of the file ``path`` in bytes.

        Raises:
            FileNotFoundError: ``path`` does not exist.
        """
        fs = self._fs()
        fs.invalidate_cache(path)
        return int(fs.size(path))

    def modified(self, path: str) -> float:
        """The modification time of the file ``path`` in seconds since the epoch.

        fsspec's ``modified(path)``: on S3, the object's ``LastModified``, as the store
        stamped it (one-second resolution).

        Raises:
            FileNotFoundError: ``path`` does not exist.
            NotImplementedError: The fsspec file system does not tell.
        """
        fs = self._fs()
        fs.invalidate_cache(path)
        return float(fs.modified(path).timestamp())

    def remove_tree(self, path: str) -> None:
        """Remove the directory ``path`` and everything under it; nothing if it is missing.

        Raises:
            ValueError: ``path`` is empty or ``"."``.
        """
        check_tree_path(path, self)
        fs = self._fs()
        fs.invalidate_cache(path)
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    @property
    def local_root(self) -> str | None:
        """``""`` for fsspec's local file system (paths are local paths), else ``None``."""
        protocol = self.wrapped.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        return "" if "file" in protocols else None


_PFIO_METHODS = ("list", "stat", "isdir", "open", "rename", "remove", "exists", "makedirs")
_REQUIRED = ("open", "exists", "makedirs", "rename", "remove", "listdir")


def _is_pfio(fs: Any) -> bool:
    return not hasattr(fs, "listdir") and all(
        callable(getattr(fs, name, None)) for name in _PFIO_METHODS
    )


def _is_fsspec(fs: Any) -> bool:
    # Never imports fsspec: a user holding an fsspec file system has imported it already.
    spec = sys.modules.get("fsspec.spec")
    return spec is not None and isinstance(fs, spec.AbstractFileSystem)


def adapt_file_system(fs: Any, owner: str) -> FileSystem:
    """The :class:`FileSystem` a writer uses for the ``fs`` a user gave.

    Args:
        fs: ``None`` (the local file system), an object with the
            :class:`FileSystem` methods (returned as is, adapters included), a pfio
            file system (wrapped in :class:`PfioFileSystem`) or an fsspec one (in
            :class:`FsspecFileSystem`; checked first, since fsspec's own ``listdir``
            returns dicts).
        owner: Who asks, for the error message (``"SimpleWriter"``).

    Returns:
        The file system to write through.

    Raises:
        TypeError: ``fs`` is none of these; the message names the missing methods.

    Example:
        >>> adapt_file_system(None, "MyWriter")
        LocalFileSystem()
    """
    if fs is None:
        return LocalFileSystem()
    if _is_fsspec(fs):
        return FsspecFileSystem(fs)
    if isinstance(fs, FileSystem):
        return fs
    if _is_pfio(fs):
        return PfioFileSystem(fs)
    missing = [name for name in _REQUIRED if not callable(getattr(fs, name, None))]
    message = (
        f"{owner}: fs must provide open, exists, makedirs, rename, remove and listdir, or be a "
        f"pfio file system (pfio.v2.from_url) or an fsspec one (fsspec.AbstractFileSystem); "
        f"{fs!r} lacks {', '.join(missing)}"
    )
    raise TypeError(message)
