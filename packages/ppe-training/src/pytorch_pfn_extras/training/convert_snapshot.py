"""Convert between a sharded snapshot directory and one ordinary snapshot file.

``python -m pytorch_pfn_extras.training.convert_snapshot SOURCE DESTINATION``

- SOURCE a directory written by ``snapshot(snapshot_mode=SnapshotMode.SHARDED)`` (on any
  number of ranks): DESTINATION becomes one file in the layout of ``manager.state_dict()``
  (``models``, ``optimizers``, ``extensions``... with full tensors), which ``torch.load(...,
  weights_only=True)`` reads on a laptop and ``snapshot(autoload=True)`` resumes from in the
  default mode. The per-rank state (``state_objects``, the trainer's position) is rank 0's.
- SOURCE a file written by ``snapshot()`` in the default mode (or by PPE 0.9):
  DESTINATION becomes a sharded snapshot directory, which
  ``snapshot(snapshot_mode=SnapshotMode.SHARDED, autoload=True)`` loads on any number of
  ranks (name it like the snapshots, e.g. ``result/snapshot_iter_1000``).

Snapshots of another target (``snapshot_object(model, ..., snapshot_mode=SHARDED)``) convert to
and from that object's ``state_dict()``. Runs in one process, without ``torch.distributed``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from collections.abc import Sequence
from typing import Any

import torch


def sharded_to_file(source: str, destination: str) -> dict[str, Any]:
    """Write the sharded snapshot directory ``source`` as one ``torch.save`` file.

    Returns:
        The state written (what ``torch.load(destination)`` returns).

    Raises:
        FileNotFoundError: ``source`` is not a complete sharded snapshot (the message names
            what is missing).
        ValueError: ``source`` is a snapshot of another mode.
    """
    from pytorch_pfn_extras.training._snapshots import _convert
    from pytorch_pfn_extras.training._snapshots._layout import describe, inspect
    from pytorch_pfn_extras.training._snapshots._storage import Storage

    found = inspect(Storage(), source)
    manifest = found.manifest
    if manifest is None:
        message = f"{describe(source, found)}: not a sharded snapshot to convert"
        raise FileNotFoundError(message)
    if manifest.mode != "SHARDED":
        message = (
            f"{source!r} is a {manifest.mode} snapshot, not a SHARDED one: its rank_<r>.pt "
            "files are ordinary snapshot files already"
        )
        raise ValueError(message)
    state, _ = _convert.to_ordinary(_convert.read_all(source))
    temporary = Storage().temporary(destination)
    try:
        torch.save(state, temporary)
        os.replace(temporary, destination)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return state


def file_to_sharded(source: str, destination: str) -> dict[str, Any]:
    """Write the ordinary snapshot file ``source`` as a sharded snapshot directory.

    Returns:
        The state converted (what ``torch.load(source, weights_only=True)`` returned).

    Raises:
        FileExistsError: ``destination`` exists.
    """
    from pytorch_pfn_extras.training._snapshots import _convert, _dcp
    from pytorch_pfn_extras.training._snapshots._layout import Manifest, commit
    from pytorch_pfn_extras.training._snapshots._storage import Storage
    from pytorch_pfn_extras.training._version import __version__

    if os.path.lexists(destination):
        message = f"{destination!r} exists; remove it or choose another destination"
        raise FileExistsError(message)
    state = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        message = f"{source!r} holds a {type(state).__name__}, not a snapshot (a dict)"
        raise ValueError(message)
    manager = _convert.is_manager_state(state)
    storage = Storage()
    final = os.path.abspath(destination)
    temporary = storage.temporary(final)
    try:
        _dcp.save(_convert.from_ordinary(state), storage, temporary, _dcp.SINGLE)
        Manifest(
            mode="SHARDED",
            world_size=1,
            content="manager" if manager else "target",
            iteration=int(state.get("_start_iteration", 0)) if manager else 0,
            ppe_version=__version__,
        ).write(storage, temporary)
        commit(storage, temporary, final)
    finally:
        storage.remove_tree(temporary)
    return state


def _describe(state: dict[str, Any]) -> str:
    from pytorch_pfn_extras.training._snapshots import _convert

    if not _convert.is_manager_state(state):
        return f"an object's state_dict() with {len(state)} entries"
    return (
        f"the manager's state at iteration {state['_start_iteration']} (models "
        f"{sorted(state['models'])}, optimizers {sorted(state['optimizers'])})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the converter (``python -m pytorch_pfn_extras.training.convert_snapshot -h``).

    Returns:
        The exit status: 0 on success, 1 on an error (printed to stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m pytorch_pfn_extras.training.convert_snapshot",
        description=(
            "Convert a sharded snapshot directory (snapshot_mode=SnapshotMode.SHARDED) into "
            "one ordinary snapshot file (torch.load-able, resumable in the default mode), or "
            "an ordinary snapshot file into a sharded snapshot directory (resumable in "
            "SHARDED mode on any number of ranks). The direction follows SOURCE."
        ),
    )
    parser.add_argument("source", metavar="SOURCE", help="a sharded snapshot directory or a file")
    parser.add_argument(
        "destination",
        metavar="DESTINATION",
        help="the file (from a directory) or the directory (from a file) to write",
    )
    args = parser.parse_args(argv)
    source, destination = args.source, args.destination
    try:
        if os.path.isdir(source):
            state = sharded_to_file(source, destination)
            kind = "one snapshot file"
        elif os.path.isfile(source):
            state = file_to_sharded(source, destination)
            kind = "a sharded snapshot directory"
        else:
            message = f"{source!r} does not exist"
            raise FileNotFoundError(message)
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError) as error:
        print(f"convert_snapshot: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {destination} ({kind}): {_describe(state)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
