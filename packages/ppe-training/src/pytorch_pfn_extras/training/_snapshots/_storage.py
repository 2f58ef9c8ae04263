"""The writer's file system as snapshots use it: files, directories, commits, DCP targets.

Every snapshot mode writes, commits, retains, cleans up and autoloads through the file system
of its writer (``writer.fs``; the local one for a writer without ``fs``): the local disk, a
pfio file system (``pfio.v2.from_url("s3://...")``) or an fsspec one (``s3fs``), which
ppe-core's writers adapt to one interface. Temporaries follow ppe-core's one convention
(``.{name}.tmp-{host}-{pid}-{random}``, :func:`pytorch_pfn_extras.writing.temporary_name`),
and stale ones are removed by its one cleanup (:func:`pytorch_pfn_extras.writing.
remove_stale_temporaries`), which checks that the process that wrote them is gone.

Where the snapshots go is :func:`snapshot_out_dir`: as in PPE 0.9, a writer given to
``snapshot()`` with a file system of its own writes under its own ``out_dir`` there. A snapshot
never creates a bucket: on S3 a missing one is an error naming it (:meth:`Storage.check_bucket`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.writing import (
    FileSystem,
    LocalFileSystem,
    remove_stale_temporaries,
    stale_temporaries,
    temporary_name,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

# The arguments of boto3.client (a pfio S3 file system's ``kwargs``: what it gives its client)
# that s3fs.S3FileSystem takes under names of its own; it passes the others, in its
# ``client_kwargs``, to its client as they are.
_S3FS_NAMES = {
    "endpoint_url": "endpoint_url",
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
    "use_ssl": "use_ssl",
}
_S3_PROTOCOLS = ("s3", "s3a")


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
        """Create the directory ``path`` and its parents; nothing on S3, where a directory is
        a prefix of keys (s3fs's ``makedirs`` creates a missing bucket, which a snapshot never
        does: see :meth:`check_bucket`)."""
        if path and self.bucket(path) is None:
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

    def stale_temporaries(self, directory: str) -> list[str]:
        """The temporaries in ``directory`` whose writer is gone (ppe-core's one rule)."""
        return stale_temporaries(self.fs, directory)

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

    @property
    def has_own_root(self) -> bool:
        """Whether paths are relative to a root of the file system's own (object storage, a
        pfio file system's directory), not the local paths of the process (ppe-core's
        ``LocalFileSystem``, fsspec's ``"file"``)."""
        return self.local("") != ""

    def fsspec(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """The fsspec URL of ``path`` and the storage options to reach it, for
        ``torch.distributed.checkpoint``'s fsspec writer and reader; ``None`` when the file
        system has no fsspec counterpart.

        An fsspec file system gives its own. A pfio S3 file system gives ``s3://`` and the
        options of s3fs that reach what pfio reaches, as pfio does: what pfio gives its boto3
        client (``kwargs``: endpoint, credentials; ``endpoint_url``, ``key``, ``secret``,
        ``token`` and ``use_ssl`` for s3fs, anything else in ``client_kwargs``), its
        botocore options (``connect_timeout``, ``read_timeout``: ``config_kwargs``) and its
        multipart part size (``mpu_chunksize``: ``default_block_size``, the part size of
        s3fs's uploads). pfio (2.8 to 2.10) takes the region, a session token and a profile
        from boto3's environment (``AWS_DEFAULT_REGION``, ``AWS_SESSION_TOKEN``,
        ``AWS_PROFILE``, ``AWS_CONFIG_FILE``...), as s3fs does: nothing is passed for them.
        """
        wrapped = getattr(self.fs, "wrapped", None)
        unstrip = getattr(wrapped, "unstrip_protocol", None)
        if callable(unstrip):
            return str(unstrip(path)), dict(getattr(wrapped, "storage_options", {}))
        bucket = getattr(wrapped, "bucket", None)
        if not (isinstance(bucket, str) and type(wrapped).__module__.startswith("pfio.")):
            return None
        cwd = str(getattr(wrapped, "cwd", "") or "")
        key = os.path.normpath(os.path.join("/", cwd, path)).lstrip("/")
        options: dict[str, Any] = {}
        client: dict[str, Any] = {}
        kwargs = getattr(wrapped, "kwargs", None)
        for name, value in (kwargs if isinstance(kwargs, Mapping) else {}).items():
            if value is None:
                continue
            if name in _S3FS_NAMES:
                options[_S3FS_NAMES[name]] = value
            else:
                client[name] = value
        if client:
            options["client_kwargs"] = client
        config = getattr(wrapped, "botocore_config", None)
        if isinstance(config, Mapping) and config:
            options["config_kwargs"] = dict(config)
        part_size = getattr(wrapped, "mpu_chunksize", None)
        if is_int(part_size) and part_size > 0:
            options["default_block_size"] = part_size
        return f"s3://{bucket}/{key}", options

    def bucket(self, path: str) -> tuple[str, str] | None:
        """The S3 bucket ``path`` is in (``""`` at the root of s3fs, where only buckets are)
        and its ``s3://`` URL; ``None`` when the file system is not S3 (pfio's or s3fs)."""
        if self.local(path) is not None:
            return None
        remote = self.fsspec(path)
        if remote is None:
            return None
        url = remote[0]
        protocol, _, rest = url.partition("://")
        if protocol not in _S3_PROTOCOLS:
            return None
        return rest.split("/", 1)[0], url

    def check_bucket(self, path: str) -> None:
        """Check that the bucket of ``path`` exists, if it is on S3 (a snapshot never
        creates one: a mistyped name is an error, not a new bucket).

        Raises:
            FileNotFoundError: The bucket does not exist, or ``path`` is at the root of
                s3fs, outside any bucket (the message names the bucket and the URL).
        """
        found = self.bucket(path)
        if found is None:
            return
        bucket, url = found
        if not bucket:
            message = (
                f"the snapshots would go to {path!r} at the root of {self.fs!r}, where only "
                "buckets are: give the writer an out_dir that starts with the bucket "
                "('bucket/prefix')"
            )
            raise FileNotFoundError(message)
        if self._bucket_exists(bucket):
            return
        message = (
            f"the bucket {bucket!r} of {url!r} does not exist (or these credentials cannot "
            "see it): create it, or correct its name; a snapshot never creates a bucket"
        )
        raise FileNotFoundError(message)

    def _bucket_exists(self, bucket: str) -> bool:
        if callable(getattr(self.fs.wrapped, "unstrip_protocol", None)):
            return bool(self.fs.exists(bucket))  # s3fs: the bucket is the first component
        # pfio's S3 file system is one bucket: any listing of it fails when it is missing.
        try:
            self.fs.exists("")
        except Exception as error:
            response = getattr(error, "response", None)  # botocore's ClientError
            code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
            if code == "NoSuchBucket":
                return False
            raise
        return True

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


def snapshot_out_dir(own: Any, manager: ExtensionsManagerProtocol) -> str:
    """The directory a snapshot extension writes into, on its writer's file system.

    As in PPE 0.9, a writer given to ``snapshot(writer=...)`` whose file system has a root of
    its own (object storage, any ``fs`` but the local disk: see :attr:`Storage.has_own_root`)
    writes under its own ``out_dir``, relative to that root (``""`` by default: the root
    itself, for ``pfio.v2.from_url("s3://bucket/prefix")`` the prefix); the manager's
    ``out_dir`` belongs to the manager's writer (often a local directory for the logs) and is
    never joined in. A writer on the local disk writes under its ``out_dir`` if it has one,
    else into the manager's; without a writer of its own, a snapshot writes into the manager's
    ``out`` through the manager's writer.

    Args:
        own: The writer given to ``snapshot()``, or ``None``.
        manager: The manager the snapshot extends.

    Raises:
        FileNotFoundError: The directory is on S3, in a bucket that does not exist (see
            :meth:`Storage.check_bucket`).
    """
    if own is None:
        out, storage = manager.out, Storage.of(manager.writer)
    else:
        storage = Storage.of(own)
        out_dir = getattr(own, "out_dir", "")
        out_dir = out_dir if isinstance(out_dir, str) else ""
        out = out_dir if out_dir or storage.has_own_root else manager.out
    storage.check_bucket(out)
    return out
