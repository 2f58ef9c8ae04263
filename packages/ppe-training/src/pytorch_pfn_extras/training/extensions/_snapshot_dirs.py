"""Snapshot directories committed atomically (the collective snapshot modes).

Every rank writes into a hidden temporary directory ``.{name}.tmp-{token}`` next to the final
one; once every rank has finished, the coordinator writes the manifest and renames the
directory to ``{name}``. A directory is therefore visible to autoload (and counted by
``n_retains``) only when it is complete: a process killed at any moment leaves at most a
hidden temporary, which the next run removes.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from pytorch_pfn_extras.training.extensions._snapshot_files import SnapshotFiles

MANIFEST = "ppe_snapshot.json"
_FORMAT = "pytorch-pfn-extras collective snapshot"
_TEMPORARY = ".tmp-"


@dataclass(frozen=True)
class Manifest:
    """What ``ppe_snapshot.json`` records about a committed snapshot directory.

    Attributes:
        mode: ``"SHARDED"`` or ``"DISTRIBUTED"`` (a :class:`SnapshotMode` name).
        world_size: Number of ranks that wrote it.
        content: ``"manager"`` (the manager's whole state) or ``"target"`` (another object's).
        iteration: The manager's iteration when it was written.
        ppe_version: The version of ppe-training that wrote it.
    """

    mode: str
    world_size: int
    content: str
    iteration: int
    ppe_version: str

    def write(self, directory: str) -> None:
        """Write the manifest into ``directory`` (flushed to disk before the commit)."""
        path = os.path.join(directory, MANIFEST)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"format": _FORMAT, **asdict(self)}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def read(cls, directory: str) -> Manifest:
        """Read the manifest of a snapshot directory.

        Raises:
            FileNotFoundError: ``directory`` has no manifest (not a complete snapshot).
            ValueError: The manifest is not one written by a snapshot.
        """
        path = os.path.join(directory, MANIFEST)
        if not os.path.exists(path):
            message = (
                f"the snapshot directory {directory!r} has no {MANIFEST}: it is not a "
                "complete snapshot (damaged, or written by another program); delete it to "
                "resume from the previous snapshot"
            )
            raise FileNotFoundError(message)
        try:
            with open(path, encoding="utf-8") as f:
                raw: Any = json.load(f)
            if raw.get("format") != _FORMAT:
                raise ValueError(f"format {raw.get('format')!r}")
            return cls(
                mode=str(raw["mode"]),
                world_size=int(raw["world_size"]),
                content=str(raw["content"]),
                iteration=int(raw["iteration"]),
                ppe_version=str(raw["ppe_version"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            message = f"{path!r} is not the manifest of a snapshot ({error})"
            raise ValueError(message) from error


def temporary_path(final: str, token: str) -> str:
    """The hidden directory a snapshot is written to before it is renamed to ``final``."""
    head, name = os.path.split(final)
    return os.path.join(head, f".{name}{_TEMPORARY}{token}")


def commit(temporary: str, final: str) -> None:
    """Rename the complete ``temporary`` directory to ``final`` (replacing an older one)."""
    if os.path.lexists(final):
        # A snapshot of the same name (rewritten after a resume): move it aside first, so
        # that ``final`` is replaced by one rename and the old copy removed after.
        head, name = os.path.split(final)
        old = os.path.join(head, f".{name}.old{_TEMPORARY}{os.path.basename(temporary)[-8:]}")
        os.replace(final, old)
        os.replace(temporary, final)
        _remove(old)
    else:
        os.replace(temporary, final)
    _sync_directory(os.path.dirname(final) or ".")


def _sync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


class SnapshotDirs:
    """The committed snapshot directories of a filename template under an output directory."""

    def __init__(self, template: str) -> None:
        self._files = SnapshotFiles(template)

    def committed(self, out_dir: str) -> list[str]:
        """Paths of the directories the template matches, newest first (hidden temporaries
        and plain files never match)."""
        return [path for path in self._files.list(_LocalFS, out_dir) if os.path.isdir(path)]

    def retain(self, out_dir: str, n_retains: int, keep: str) -> list[str]:
        """Delete the oldest committed snapshots beyond ``n_retains`` (never ``keep``).

        Returns:
            The paths deleted.
        """
        removed = []
        for old in self.committed(out_dir)[n_retains:]:
            if os.path.normpath(old) == os.path.normpath(keep):
                continue
            _remove(old)
            removed.append(old)
        return removed

    def remove_temporaries(self, out_dir: str) -> list[str]:
        """Delete the temporary directories left by snapshots that never committed.

        Returns:
            The paths deleted.
        """
        directory = os.path.join(out_dir, self._files.directory)
        try:
            names = os.listdir(directory or ".")
        except (FileNotFoundError, NotADirectoryError):
            return []
        removed = []
        for name in names:
            if not name.startswith(".") or _TEMPORARY not in name:
                continue
            base = name[1:].split(_TEMPORARY, 1)[0]
            base = base.removesuffix(".old")
            if self._files.match(base) is None:
                continue
            path = os.path.join(directory, name)
            _remove(path)
            removed.append(path)
        return removed


class _LocalFS:
    """The part of a writer's file system :class:`SnapshotFiles` lists with."""

    @staticmethod
    def listdir(path: str) -> list[str]:
        return os.listdir(path)
