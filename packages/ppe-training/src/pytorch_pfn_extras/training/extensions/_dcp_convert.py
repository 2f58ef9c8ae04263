"""A sharded snapshot as one ordinary snapshot (``torch.save`` layout), and back: the
converter's engine (:mod:`pytorch_pfn_extras.training.convert_snapshot`)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from pytorch_pfn_extras.training.extensions._dcp_state import (
    MODELS,
    OPTIMIZERS,
    RANK_KEYS,
    RANKS,
    TARGET,
    TRAINING,
    Group,
    blob,
    check_files,
    load_state,
    read_metadata,
    tree_paths,
    unblob,
)


def read_all(directory: str) -> dict[str, Any]:
    """Everything a sharded snapshot holds, in one process and without the models: the
    nested DCP state dict with full (unsharded) tensors, ``training`` and ``ranks`` blobs
    loaded."""
    metadata = read_metadata(directory)
    check_files(directory, metadata)
    paths = tree_paths(metadata)
    flat: dict[str, Any] = {}
    for key, meta in metadata.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            flat[key] = torch.empty(meta.size, dtype=meta.properties.dtype)
        elif str(paths[key][0]) in (TRAINING, RANKS):
            flat[key] = io.BytesIO()
        else:
            flat[key] = None
    load_state(flat, directory, Group(0, 1, None, no_dist=True))
    nested = _unflatten({paths[key]: value for key, value in flat.items()})
    if TRAINING in nested:
        nested[TRAINING] = unblob(nested[TRAINING], directory, "training state")
    if RANKS in nested:
        nested[RANKS] = {
            int(rank): unblob(value, directory, f"state of rank {rank}")
            for rank, value in nested[RANKS].items()
        }
    return nested


def _unflatten(items: Mapping[tuple[Any, ...], Any]) -> dict[str, Any]:
    root: dict[Any, Any] = {}
    for path, value in items.items():
        node = root
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return _lists(root)  # type: ignore[no-any-return]


def _lists(node: Any) -> Any:
    # DCP records list positions as ints and dict keys as strings: dicts of int keys were lists.
    if not isinstance(node, dict):
        return node
    converted = {key: _lists(value) for key, value in node.items()}
    if converted and all(isinstance(key, int) for key in converted):
        return [converted[key] for key in sorted(converted)]
    return converted


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
