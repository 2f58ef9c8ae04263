"""A sharded snapshot as one ordinary snapshot (``torch.save`` layout), and back: the
converter's engine (:mod:`pytorch_pfn_extras.training.convert_snapshot`).

Reading goes through DCP's own converter (``torch.distributed.checkpoint.format_utils.
dcp_to_torch_save``), which loads every tensor whole in one process, without the models.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import torch

from pytorch_pfn_extras.training._snapshots import _dcp
from pytorch_pfn_extras.training._snapshots._manager_state import (
    MODELS,
    OPTIMIZERS,
    RANK_KEYS,
    RANKS,
    TARGET,
    TRAINING,
    blob,
    unblob,
)
from pytorch_pfn_extras.training._snapshots._storage import Storage


def read_all(directory: str) -> dict[str, Any]:
    """Everything the sharded snapshot ``directory`` (on the local disk) holds, with full
    tensors: the nested DCP state dict, ``training`` and ``ranks`` loaded (with
    ``torch.load(weights_only=True)``, as every snapshot)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    storage = Storage()
    _dcp.check_files(storage, directory, _dcp.read_metadata(storage, directory))
    _dcp.quiet_single_process()
    with tempfile.TemporaryDirectory(prefix="ppe-convert-") as scratch:
        path = os.path.join(scratch, "snapshot.pt")
        dcp_to_torch_save(directory, path)
        # DCP's converter keeps the byte entries (training, ranks) as BytesIO objects.
        with torch.serialization.safe_globals([io.BytesIO]):
            nested: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    if TRAINING in nested:
        nested[TRAINING] = unblob(nested[TRAINING], directory, "training state")
    if RANKS in nested:
        nested[RANKS] = {
            int(rank): unblob(value, directory, f"state of rank {rank}")
            for rank, value in nested[RANKS].items()
        }
    return nested


def to_ordinary(nested: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The ordinary snapshot (``torch.save`` layout of ``manager.state_dict()``, or the
    target's ``state_dict()``) of what :func:`read_all` returned, and its content kind."""
    if TARGET in nested:
        return dict(nested[TARGET]), "target"
    state = dict(nested[TRAINING])
    state[MODELS] = dict(nested.get(MODELS, {}))
    state[OPTIMIZERS] = {
        name: {
            "state": {int(i): value for i, value in optimizer.get("state", {}).items()},
            "param_groups": optimizer.get("param_groups", []),
        }
        for name, optimizer in nested.get(OPTIMIZERS, {}).items()
    }
    ranks = nested.get(RANKS, {})
    if ranks:
        state.update(ranks[min(ranks)])
    return state, "manager"


def is_manager_state(state: Mapping[str, Any]) -> bool:
    """Whether an ordinary snapshot holds a manager's state (rather than an object's)."""
    return MODELS in state and OPTIMIZERS in state and "_start_iteration" in state


def from_ordinary(state: Mapping[str, Any]) -> dict[str, Any]:
    """The DCP state dict (of one rank) of an ordinary snapshot."""
    if not is_manager_state(state):
        return {TARGET: dict(state)}
    skip = {MODELS, OPTIMIZERS, *RANK_KEYS}
    return {
        MODELS: dict(state[MODELS]),
        OPTIMIZERS: dict(state[OPTIMIZERS]),
        TRAINING: blob({key: value for key, value in state.items() if key not in skip}),
        RANKS: {"0": blob({key: state[key] for key in RANK_KEYS if key in state})},
    }
