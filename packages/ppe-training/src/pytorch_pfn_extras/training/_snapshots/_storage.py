"""The writer's file system as snapshots use it: files, directories, commits, DCP targets.

Every snapshot mode writes, commits, retains, cleans up and autoloads through the file system
of its writer (``writer.fs``; the local one for a writer without ``fs``): the local disk, a
pfio file system (``pfio.v2.from_url("s3://...")``) or an fsspec one (``s3fs``), which
ppe-core's writers adapt to one interface. Temporaries follow ppe-core's one convention
(``.{name}.tmp-{host}-{pid}-{random}``, :func:`pytorch_pfn_extras.writing.temporary_name`),
and stale ones are removed by its one cleanup (:func:`pytorch_pfn_extras.writing.
remove_stale_temporaries`), which checks that the process that wrote them is gone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO, Any

from pytorch_pfn_extras.writing import (
    FileSystem,
    LocalFileSystem,
    remove_stale_temporaries,
    temporary_name,
)


class Storage:
    """Snapshot operations over a writer's file system.

    Args:
        fs: The file system (a writer's ``fs``); the local one when ``None``.
    """

    def __init__(self, fs: FileSystem | None = None) -> None:
        self.fs: Any = LocalFileSystem() if fs is None else fs

    @classmethod
    def of(cls, writer: Any) -> Storage:
        """The storage of ``writer`` (a plain callable writer writes to the local disk)."""
        return cls(getattr(writer, "fs", None))

    def __repr__(self) -> str:
        return f"Storage({self.fs!r})"

    # ------------------------------------------------------------------ entries

    def listdir(self, path: str) -> list[str]:
        """The names in the directory ``path`` (``[]`` when it does not exist)."""
        try:
            return list(self.fs.listdir(path or "."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (a common prefix on object storage)."""
        isdir = getattr(self.fs, "isdir", None)
        if callable(isdir):
            return bool(isdir(path))
        # A file system without isdir: a directory is what lists entries (an empty one
        # cannot be told from a file, and is taken for one).
        try:
            return bool(self.fs.listdir(path))
        except (OSError, ValueError):
            return False

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return bool(self.fs.exists(path))

    def size(self, path: str) -> int | None:
        """The size of the file ``path`` in bytes, ``None`` when it is missing."""
        size = getattr(self.fs, "size", None)
        try:
            if callable(size):
                return int(size(path))
            with self.fs.open(path, "rb") as f:
                return len(f.read())
        except (FileNotFoundError, IsADirectoryError):
            return None

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        """Open the file ``path``."""
        return self.fs.open(path, mode)  # type: ignore[no-any-return]

    def makedirs(self, path: str) -> None:
        """Create the directory ``path`` and its parents (nothing on object storage)."""
        if path:
            self.fs.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        """Remove the file ``path`` (gone already is fine)."""
        try:
            self.fs.remove(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        """Remove the directory ``path`` and everything in it (gone already is fine)."""
        remove_tree = getattr(self.fs, "remove_tree", None)
        if callable(remove_tree):
            remove_tree(path)
            return
        for name in self.listdir(path):  # a file system without remove_tree: one level
            self.remove(os.path.join(path, name))

    def remove_stale_temporaries(self, directory: str) -> list[str]:
        """Remove the temporaries (files and directories) in ``directory`` left by processes
        of this host that are gone (ppe-core's one cleanup)."""
        return remove_stale_temporaries(self.fs, directory)

    # ------------------------------------------------------------------ where DCP writes

    def local(self, path: str) -> str | None:
        """``path`` on the local disk, or ``None`` when the file system is not local."""
        if isinstance(self.fs, LocalFileSystem):
            return path
        root = getattr(self.fs, "local_root", None)
        if not isinstance(root, str):
            return None
        return os.path.join(root, path) if root else path

    def fsspec(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """The fsspec URL of ``path`` and the storage options to reach it, for
        ``torch.distributed.checkpoint``'s fsspec writer and reader; ``None`` when the file
        system has no fsspec counterpart.

        An fsspec file system gives its own; a pfio S3 file system gives ``s3://`` with its
        endpoint and credentials (s3fs reads the same environment variables as boto3 when
        pfio was given none).
        """
        wrapped = getattr(self.fs, "wrapped", None)
        unstrip = getattr(wrapped, "unstrip_protocol", None)
        if callable(unstrip):
            return str(unstrip(path)), dict(getattr(wrapped, "storage_options", {}))
        bucket = getattr(wrapped, "bucket", None)
        if isinstance(bucket, str) and type(wrapped).__module__.startswith("pfio."):
            cwd = str(getattr(wrapped, "cwd", "") or "")
            key = os.path.normpath(os.path.join("/", cwd, path)).lstrip("/")
            options: dict[str, Any] = {}
            for option, attribute in (
                ("endpoint_url", "endpoint"),
                ("key", "aws_access_key_id"),
                ("secret", "aws_secret_access_key"),
            ):
                value = getattr(wrapped, attribute, None)
                if value:
                    options[option] = os.path.expandvars(str(value))
            return f"s3://{bucket}/{key}", options
        return None

    # ------------------------------------------------------------------ commits

    def temporary(self, final: str) -> str:
        """A fresh temporary name next to ``final`` (ppe-core's convention)."""
        head, name = os.path.split(final)
        return os.path.join(head, temporary_name(name))

    def move_directory(self, temporary: str, final: str, *, last: Iterable[str] = ()) -> None:
        """Rename the directory ``temporary`` to ``final`` (which must not exist).

        On a local disk this is one atomic rename (the parent directory is synced). On object
        storage, which renames object by object, the files move one by one with the names in
        ``last`` (the commit marker) at the end, so that ``final`` is complete once they are
        there; the emptied temporary is removed.
        """
        local_temporary, local_final = self.local(temporary), self.local(final)
        if local_temporary is not None and local_final is not None:
            os.replace(local_temporary, local_final)
            self.sync_directory(os.path.dirname(final))
            return
        names = self.listdir(temporary)
        trailing = [name for name in names if name in set(last)]
        for name in [name for name in names if name not in trailing] + trailing:
            self.fs.rename(os.path.join(temporary, name), os.path.join(final, name))
        self.remove_tree(temporary)

    def sync_directory(self, directory: str) -> None:
        """Make the renames inside ``directory`` durable (local disks only)."""
        fsync_dir = getattr(self.fs, "fsync_dir", None)
        if callable(fsync_dir):
            try:
                fsync_dir(directory or ".")
            except OSError:
                pass
