"""Batches: moving nested containers of tensors, and feeding a batch to a function."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch


def move_to(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Return ``obj`` with every tensor moved to ``device``, keeping its structure.

    Dicts (and other mappings), lists, tuples and named tuples are rebuilt with
    their contents moved; any other object is returned unchanged.
    """
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if type(obj) is dict:  # the common case, with tensors moved inline
        return {
            key: value.to(device, non_blocking=non_blocking)
            if isinstance(value, torch.Tensor)
            else move_to(value, device, non_blocking)
            for key, value in obj.items()
        }
    if isinstance(obj, list):
        return [move_to(value, device, non_blocking) for value in obj]
    if isinstance(obj, tuple):
        moved = [move_to(value, device, non_blocking) for value in obj]
        if hasattr(obj, "_fields"):  # a named tuple
            return type(obj)(*moved)
        return tuple(moved)
    if isinstance(obj, Mapping):
        items = {key: move_to(value, device, non_blocking) for key, value in obj.items()}
        try:
            return cast(Any, type(obj))(items)
        except TypeError:  # a mapping type that cannot be built from a dict
            return items
    return obj


def call_with_batch(func: Callable[..., Any], batch: Any) -> Any:
    """Call ``func`` with ``batch``: a dict as keyword arguments, a tuple or list
    as positional arguments, anything else as the only argument."""
    if isinstance(batch, Mapping):
        return func(**batch)
    if isinstance(batch, (tuple, list)):
        return func(*batch)
    return func(batch)


def select_outputs(outs: Any, out_keys: tuple[str, ...] | None, device: torch.device) -> Any:
    """Return ``outs`` (or only its ``out_keys`` entries, as a dict) moved to ``device``."""
    if out_keys is None:
        return move_to(outs, device)
    if not isinstance(outs, Mapping):
        message = f"out_keys={list(out_keys)!r} needs outputs that are mappings, got {type(outs).__name__}"
        raise TypeError(message)
    missing = [key for key in out_keys if key not in outs]
    if missing:
        message = f"outputs have no key(s) {missing!r}; available keys: {list(outs)!r}"
        raise KeyError(message)
    return {key: move_to(outs[key], device) for key in out_keys}
