"""Reading one snapshot file (a DEFAULT or DISTRIBUTED snapshot, a rank's file of PPE 0.9's
SHARDED mode): ``torch.load(weights_only=True)`` through the writer's file system.

A failure to read is not damage. An ``OSError`` of the file system (an NFS or S3 hiccup, a
permission) is raised as an ``OSError`` naming the file, so that autoload stops instead of
skipping a good snapshot; only content proven unreadable (truncated, not a ``torch.save``
file) is :class:`DamagedSnapshot`, which autoload may skip.
"""

from __future__ import annotations

import pickle
from typing import IO, Any

import torch

from pytorch_pfn_extras.training._snapshots._storage import Storage


class DamagedSnapshot(ValueError):
    """A snapshot whose content is proven unreadable (truncated, corrupted, not a snapshot).

    Autoload skips it (with a warning naming it) and tries the previous snapshot; retention
    never counts it as one of the snapshots kept.

    Args:
        path: The snapshot.
        reason: What is wrong with it, as a sentence's end (``"is damaged (EOFError: ...)"``).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"the snapshot {path!r} {reason}")
        self.path = path
        self.reason = reason


def is_disallowed_global(error: BaseException) -> bool:
    """Whether ``torch.load(weights_only=True)`` refused a valid file for its content."""
    return isinstance(error, pickle.UnpicklingError) and "Unsupported global" in str(error)


def read_error(path: str, error: OSError, doing: str = "reading") -> OSError:
    """The ``OSError`` raised when ``path`` cannot be read: its errno, naming the file."""
    message = (
        f"{doing} the snapshot {path!r} failed ({type(error).__name__}: {error}); this is "
        "an error of the file system, not damage: the snapshot is not skipped (resume once "
        "it can be read, or move it away to resume from the previous one)"
    )
    raised = OSError(error.errno, message) if error.errno is not None else OSError(message)
    raised.__cause__ = error
    return raised


class _Reads:
    """A file object that remembers the ``OSError`` its reads raised (torch's zip reader,
    in C++, reports them as its own ``RuntimeError``)."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self._file = fileobj
        self.error: OSError | None = None

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._file, name)(*args)
        except OSError as error:
            self.error = error
            raise

    def read(self, *args: Any) -> Any:
        return self._call("read", *args)

    def readinto(self, *args: Any) -> Any:
        return self._call("readinto", *args)

    def readline(self, *args: Any) -> Any:
        return self._call("readline", *args)

    def seek(self, *args: Any) -> Any:
        return self._call("seek", *args)

    def tell(self) -> Any:
        return self._call("tell")

    def seekable(self) -> bool:
        return True


def load_file(storage: Storage, path: str) -> Any:
    """The content of the snapshot file ``path``, on the CPU.

    Raises:
        OSError: The file system failed to open or read it (the message names the file).
        DamagedSnapshot: Its content is not a complete ``torch.save`` file.
        pickle.UnpicklingError: The file holds objects ``weights_only`` refuses (the
            message says how to allow them).
    """
    try:
        fileobj = storage.open(path, "rb")
    except OSError as error:
        raise read_error(path, error, "opening") from error
    reads = _Reads(fileobj)
    try:
        with fileobj:
            return torch.load(reads, map_location="cpu", weights_only=True)  # type: ignore[arg-type]
    except Exception as error:
        if reads.error is not None:
            raise read_error(path, reads.error) from reads.error
        if isinstance(error, OSError):  # closing it failed
            raise read_error(path, error) from error
        if is_disallowed_global(error):
            message = (
                f"the snapshot {path!r} holds objects that torch.load(weights_only=True) "
                "refuses (snapshots must contain only tensors, numbers, strings and "
                "lists/dicts of them; allow a class with "
                f"torch.serialization.add_safe_globals([...])): {error}"
            )
            raise pickle.UnpicklingError(message) from error
        raise DamagedSnapshot(path, f"is damaged ({type(error).__name__}: {error})") from error
