"""The per-rank state of a sharded snapshot loaded on another number of ranks."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch


def merge_rank_states(
    saved: Sequence[Mapping[str, Any]], current: Mapping[str, Any], world_size: int
) -> dict[str, Any]:
    """The per-rank state to load on a world size other than the snapshot's.

    An entry (each state object, the trainer's position) that every rank of the snapshot
    saved alike is loaded; one that differs between them (a data loader's position over a
    ``DistributedSampler``) cannot be mapped onto another number of ranks: it keeps its
    current state, with one warning naming it.
    """
    merged: dict[str, Any] = {}
    kept: list[str] = []
    for key, value in current.items():
        if isinstance(value, Mapping) and key == "state_objects":
            objects: dict[str, Any] = {}
            for name, own in value.items():
                found = [s.get(key, {}).get(name, _ABSENT) for s in saved]
                objects[name] = _agreed(found, own, f"{key}[{name!r}]", kept)
            for name in sorted(set().union(*(s.get(key, {}) for s in saved)) - set(value)):
                objects[name] = saved[0][key][name]  # unknown here: the manager warns
            merged[key] = objects
        else:
            merged[key] = _agreed([s.get(key, _ABSENT) for s in saved], value, key, kept)
    if kept:
        message = (
            f"the snapshot was written by {len(saved)} ranks and is loaded by {world_size}: "
            f"{kept} differ between the ranks that wrote it, so no rank here can take them "
            "over; they keep their current state (a data loader starts its epoch again; see "
            "'Resuming on another number of ranks' in docs/sharded-snapshots.md)"
        )
        warnings.warn(message, UserWarning, stacklevel=4)
    return merged


_ABSENT = object()


def _agreed(found: list[Any], own: Any, label: str, kept: list[str]) -> Any:
    """The value every rank saved, or ``own`` (noted in ``kept`` if some rank saved one)."""
    if all(value is _ABSENT for value in found):
        return own  # no rank saved it: the manager warns about what the snapshot lacks
    if not any(value is _ABSENT for value in found) and all(
        _equal(found[0], value) for value in found[1:]
    ):
        return found[0]
    kept.append(label)
    return own


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return bool(a == b)
