"""What in an output directory is the project's own: the only entries a snapshot may replace
or delete.

A snapshot file is recognised by its first bytes (a ``torch.save`` file: a zip archive, or a
pickle stream for the legacy format and pickle-based ``savefun``\\ s), a snapshot directory by
its manifest (:mod:`._layout`). A symbolic link is never anyone's snapshot here: it is neither
replaced, nor followed to delete what it points to.
"""

from __future__ import annotations

import enum
import os
import stat
import warnings

from pytorch_pfn_extras.training._snapshots._storage import Storage

# torch.save's zip archive, and a pickle stream of protocol 2 or later (torch.save's legacy
# format, pickle.dump).
_SNAPSHOT_HEADS = (b"PK\x03\x04", b"\x80")


class Entry(enum.Enum):
    """What a path of the output directory is, without following a symbolic link."""

    MISSING = "missing"
    FILE = "file"
    DIRECTORY = "directory"
    LINK = "symbolic link"


def entry(storage: Storage, path: str) -> Entry:
    """What ``path`` is (a link is reported as a link, never as what it points to).

    Raises:
        OSError: The file system failed to tell.
    """
    local = storage.local(path)
    if local is not None:
        try:
            mode = os.lstat(local).st_mode
        except FileNotFoundError:
            return Entry.MISSING
        if stat.S_ISLNK(mode):
            return Entry.LINK
        return Entry.DIRECTORY if stat.S_ISDIR(mode) else Entry.FILE
    if storage.isdir(path):
        return Entry.DIRECTORY
    return Entry.FILE if storage.exists(path) else Entry.MISSING


def is_snapshot_file(storage: Storage, path: str) -> bool:
    """Whether the file ``path`` starts as a snapshot file does (see the module docstring).

    Raises:
        OSError: The file cannot be read.
    """
    with storage.open(path, "rb") as f:
        head = f.read(4)
    return any(head.startswith(magic) for magic in _SNAPSHOT_HEADS)


class ForeignEntries:
    """The entries named like snapshots that are not the project's own, each warned about once.

    Args:
        owner: Who skips them, for the warning (``"snapshot(n_retains=3)"``).
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._warned: set[str] = set()

    def skip(self, path: str, why: str) -> None:
        """Warn (once per path) that ``path`` is left alone because of ``why``."""
        if path in self._warned:
            return
        self._warned.add(path)
        message = (
            f"{self._owner}: {path!r} is named like a snapshot but {why}; it is left as it is "
            "(a snapshot never deletes or replaces what it cannot read as its own)"
        )
        warnings.warn(message, UserWarning, stacklevel=3)
