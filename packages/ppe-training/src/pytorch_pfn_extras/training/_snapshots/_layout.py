"""Snapshot directories: what one holds, committing one, and retention.

Two kinds of directory are snapshots this package reads:

- ours (``SnapshotMode.SHARDED``, and ``DISTRIBUTED`` of ppe-training 0.1), committed once
  every rank finished with the manifest ``ppe_snapshot.json`` written last. On a local disk
  it is written into a hidden temporary directory next to the final one and renamed (one
  atomic rename): a process killed at any moment leaves at most a temporary, which the next
  run removes once its writer is gone. On object storage, where a rename copies every
  object, it is written in place and the manifest commits it (as PPE 0.9's ``complete``
  marker did): a job killed while writing leaves a *partial* directory (DCP's files without
  a manifest), which autoload skips and the next save of that name replaces;
- PPE 0.9's ``SnapshotMode.SHARDED``: one ``torch.save`` file per rank named by the rank
  (``0``, ``1``...) and an empty ``complete`` marker written last.

Anything else in the output directory (a file, a directory of unknown content) is never
deleted, replaced or renamed: a snapshot whose name collides with it is an error naming it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from pytorch_pfn_extras.training._snapshots._files import SnapshotFiles
from pytorch_pfn_extras.training._snapshots._own import ForeignEntries
from pytorch_pfn_extras.training._snapshots._storage import Storage
from pytorch_pfn_extras.writing import hold_lease, temporary_base

MANIFEST = "ppe_snapshot.json"
PPE09_COMPLETE = "complete"
_FORMAT = "pytorch-pfn-extras collective snapshot"
# What torch.distributed.checkpoint writes into a snapshot directory before the manifest.
_DCP_FILE = re.compile(r"\.metadata(\.tmp)?|__[0-9]+_[0-9]+\.distcp")


@dataclass(frozen=True)
class Manifest:
    """What ``ppe_snapshot.json`` records about a committed snapshot directory.

    Attributes:
        mode: ``"SHARDED"`` (or ``"DISTRIBUTED"`` in directories of ppe-training 0.1).
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

    def write(self, storage: Storage, directory: str) -> None:
        """Write the manifest into ``directory`` (synced to disk before the commit)."""
        with storage.open(os.path.join(directory, MANIFEST), "wb") as f:
            f.write(json.dumps({"format": _FORMAT, **asdict(self)}, indent=1).encode())
            f.flush()
            fsync = getattr(storage.fs, "fsync", None)
            if callable(fsync):
                fsync(f)

    @classmethod
    def read(cls, storage: Storage, directory: str) -> Manifest:
        """Read the manifest of a snapshot directory.

        Raises:
            ValueError: The manifest is not one written by a snapshot.
        """
        path = os.path.join(directory, MANIFEST)
        try:
            with storage.open(path, "rb") as f:
                raw: Any = json.loads(f.read().decode())
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


@dataclass(frozen=True)
class Found:
    """What a path of the output directory holds.

    Attributes:
        kind: ``"ours"`` (a committed directory with a manifest), ``"ppe09"`` (a complete
            PPE 0.9 SHARDED directory), ``"partial"`` (DCP's files without a manifest: a
            sharded snapshot written in place on object storage that never committed),
            ``"damaged"`` (a manifest that cannot be read), ``"link"`` (a symbolic link,
            never followed to replace or delete), ``"file"`` (a file), ``"missing"``
            (nothing there), or ``"unknown"`` (anything else).
        manifest: The manifest of ``"ours"``.
        world_size: The ranks that wrote ``"ours"`` or ``"ppe09"``.
        detail: Why a ``"damaged"`` manifest cannot be read.
    """

    kind: str
    manifest: Manifest | None = None
    world_size: int = 0
    detail: str = ""


def inspect(storage: Storage, path: str, *, links: bool = False) -> Found:
    """What ``path`` holds (see :class:`Found`).

    Args:
        links: Tell a symbolic link as ``"link"`` instead of what it points to (for what
            would replace or delete it).

    Raises:
        OSError: The file system failed to list or read it.
    """
    local = storage.local(path)
    if links and local is not None and os.path.islink(local):
        return Found("link")
    if not storage.isdir(path):
        return Found("file" if storage.exists(path) else "missing")
    names = storage.listdir(path)
    if MANIFEST in names:
        try:
            manifest = Manifest.read(storage, path)
        except ValueError as error:
            return Found("damaged", detail=str(error))
        return Found("ours", manifest, manifest.world_size)
    ranks = [name for name in names if name.isdigit()]
    numbered = sorted(int(rank) for rank in ranks) == list(range(len(ranks)))
    if PPE09_COMPLETE in names and ranks and len(ranks) + 1 == len(names) and numbered:
        return Found("ppe09", world_size=len(ranks))
    if names and all(_DCP_FILE.fullmatch(name) for name in names):
        return Found("partial")
    return Found("unknown")


def describe(path: str, found: Found) -> str:
    """How an error message names what ``path`` holds."""
    if found.kind == "file":
        return f"{path!r} is a file (a DEFAULT or DISTRIBUTED snapshot, or not a snapshot)"
    if found.kind == "ours" and found.manifest is not None:
        return f"{path!r} is a SnapshotMode.{found.manifest.mode} snapshot directory"
    if found.kind == "ppe09":
        return f"{path!r} is a PPE 0.9 SHARDED snapshot directory"
    if found.kind == "partial":
        return (
            f"{path!r} is a sharded snapshot without its {MANIFEST} (its ranks' files only: "
            "it never committed, or lost its manifest)"
        )
    if found.kind == "damaged":
        return f"{path!r} is a snapshot directory whose manifest is damaged: {found.detail}"
    if found.kind == "link":
        return f"{path!r} is a symbolic link"
    if found.kind == "missing":
        return f"{path!r} does not exist"
    return (
        f"{path!r} is a directory that is not a complete snapshot (no {MANIFEST}, nor PPE "
        f"0.9's {PPE09_COMPLETE!r} marker)"
    )


def _collision(final: str, found: Found) -> FileExistsError:
    return FileExistsError(
        f"cannot write the snapshot: {describe(final, found)}, and a snapshot never replaces "
        "what it cannot read; move it away, or choose another filename"
    )


def directory_to_write(storage: Storage, final: str) -> str:
    """Where the snapshot ``final`` is written before :func:`commit`: a fresh temporary next
    to it on a local disk (or where ``final`` holds a snapshot to replace); ``final`` itself
    on object storage (a partial one there is removed first).

    Raises:
        FileExistsError: ``final`` is a file or a directory that is not a snapshot this
            package reads; it is left as it is.
    """
    local = storage.local(final) is not None
    found = inspect(storage, final, links=True)
    if found.kind == "missing":
        return storage.temporary(final) if local else final
    if found.kind not in ("ours", "ppe09", "partial"):
        raise _collision(final, found)
    if found.kind == "partial" and not local:
        storage.remove_tree(final)
        return final
    return storage.temporary(final)


def commit(storage: Storage, written: str, final: str) -> None:
    """Make the complete directory ``written`` (its manifest written) the snapshot ``final``.

    Written in place (object storage), it is committed already. From a temporary, it is
    renamed to ``final``. A snapshot directory of the same name (an epoch-named snapshot
    saved twice, a rewrite after a resume) is replaced: on a local disk it is renamed aside,
    the new one renamed in, then the old one removed; on object storage its manifest is
    removed first, then its files, then the new files move in, manifest last. A process
    killed in between leaves the committed snapshots in temporaries (or in part in
    ``final``), from which the next run's :meth:`SnapshotDirs.recover` restores the newer.

    Raises:
        FileExistsError: ``final`` is a file or a directory that is not a snapshot this
            package reads; it is left as it is, and the new snapshot is not committed.
    """
    if written == final:
        return
    found = inspect(storage, final, links=True)
    if found.kind == "missing":
        storage.move_directory(written, final, last=(MANIFEST,))
        return
    if found.kind not in ("ours", "ppe09", "partial"):
        raise _collision(final, found)
    if storage.local(final) is not None:
        # The old one aside under a lease until removed: if killed meanwhile, the next run on
        # any host recovers it (the name is missing) or removes it (the name was committed).
        old = storage.temporary(final)
        with hold_lease(storage.fs, old):
            storage.move_directory(final, old)
            storage.move_directory(written, final, last=(MANIFEST,))
            storage.remove_tree(old)
        return
    # Object storage: its manifest first, so that a job killed while the rest goes leaves a
    # partial directory (skipped by autoload, completed by :meth:`SnapshotDirs.recover`),
    # never a committed one with shards missing.
    storage.remove(os.path.join(final, MANIFEST))
    storage.remove_tree(final)
    storage.move_directory(written, final, last=(MANIFEST,))


class SnapshotDirs:
    """The snapshot directories of a filename template under an output directory."""

    def __init__(self, template: str) -> None:
        self.files = SnapshotFiles(template)

    def candidates(self, storage: Storage, out_dir: str) -> list[str]:
        """The paths the template matches, newest first (temporaries never match)."""
        return self.files.list(storage, out_dir)

    def retain(
        self, storage: Storage, out_dir: str, n_retains: int, keep: str, foreign: ForeignEntries
    ) -> list[str]:
        """Delete the oldest snapshot directories (ours and PPE 0.9's) beyond ``n_retains``,
        never ``keep`` nor anything that is not a snapshot directory (a symbolic link, a file,
        a directory without a readable manifest: each named once by ``foreign``).

        Returns:
            The paths deleted.
        """
        kept = 0
        removed = []
        for path in self.candidates(storage, out_dir):
            found = inspect(storage, path, links=True)
            if found.kind not in ("ours", "ppe09"):
                # partial: a save in progress on object storage; missing: removed meanwhile
                if found.kind not in ("partial", "missing"):
                    foreign.skip(path, describe(path, found).removeprefix(f"{path!r} "))
                continue
            kept += 1
            if kept <= n_retains or os.path.normpath(path) == os.path.normpath(keep):
                continue
            storage.remove_tree(path)
            removed.append(path)
        return removed

    def recover(self, storage: Storage, out_dir: str, stale: list[str]) -> list[str]:
        """Finish the commits that a killed process left half done.

        Replacing a snapshot of the same name renames the old directory aside, then the new
        one in (on object storage: removes the old one, then moves the new one's files,
        manifest last). A process killed in between leaves the name missing (or partial)
        and the committed snapshots in temporaries. For each name the template matches whose
        final directory is missing or partial, the newest of the ``stale`` temporaries (those
        of gone writers) holding a readable manifest is moved in.

        Returns:
            The snapshot directories recovered.
        """
        directory = os.path.join(out_dir, self.files.directory)
        best: dict[str, tuple[int, str]] = {}
        for temporary in stale:
            base = temporary_base(temporary)
            final = os.path.join(directory, base or "")
            if base is None or not self.files.contains(final, out_dir):
                continue
            found = inspect(storage, temporary, links=True)
            if found.kind != "ours" or found.manifest is None:
                continue
            iteration = found.manifest.iteration
            if final not in best or iteration > best[final][0]:
                best[final] = (iteration, temporary)
        recovered = []
        for final, (_iteration, temporary) in sorted(best.items()):
            now = inspect(storage, final, links=True)
            # On object storage a partial one holds what was moved before the kill.
            moved_in_part = now.kind == "partial" and storage.local(final) is None
            if now.kind == "missing" or moved_in_part:
                storage.move_directory(temporary, final, last=(MANIFEST,))
                recovered.append(final)
        return recovered

    def stale_temporaries(self, storage: Storage, out_dir: str) -> list[str]:
        """The temporaries of the template's directory whose writer is gone."""
        return storage.stale_temporaries(os.path.join(out_dir, self.files.directory))

    def remove_temporaries(self, storage: Storage, out_dir: str) -> list[str]:
        """Remove the stale temporaries of the template's directory (see :class:`Storage`)."""
        directory = os.path.join(out_dir, self.files.directory)
        return storage.remove_stale_temporaries(directory)
