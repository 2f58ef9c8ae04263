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
    """Call ``func`` with ``batch`` the way PPE passes a batch to a model or a CodeBlock.

    A mapping (a dict) is passed as keyword arguments, a tuple or a list (a named tuple
    too) as positional arguments, anything else (a tensor) as the only argument. The
    handler, the evaluator, ``ppe.map`` and :class:`PyTorchRuntime` all pass batches this way;
    a runtime of your own (``BaseRuntime.execute``, ``BaseRuntime.map``) can too.

    Args:
        func: The callable to run: a module, its ``forward``, a CodeBlock, any function.
        batch: One batch, as a data loader yields it.

    Returns:
        What ``func`` returns.

    Example:
        >>> call_with_batch(lambda x, t: x - t, {"x": 3, "t": 1})
        2
        >>> call_with_batch(lambda x, t: x - t, (3, 1)), call_with_batch(abs, -3)
        (2, 3)
    """
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
