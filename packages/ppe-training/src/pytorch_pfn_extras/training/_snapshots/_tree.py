"""The one traversal of a state tree: its tensors with their paths, and a copy to refill.

The asynchronous stager needs, for every tensor of a state dict, its path (to defer the
optimizer state and to name a torn tensor), its layout (to know whether its CPU mirror still
fits) and its place (to put the mirror's tensor there). :func:`flatten` visits the tree once
and records all three; :func:`fill` puts tensors into the skeleton it returned.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

_ATOMIC = (str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device)


class _Slot(NamedTuple):
    """Where the tensor of this position goes in a skeleton."""

    position: int


@dataclass
class Flat:
    """A state tree taken apart by :func:`flatten`.

    Attributes:
        paths: The path of each tensor (its keys and list positions, as strings).
        tensors: The tensors, in a fixed order (the same for trees of the same layout).
        skeleton: A copy of the tree with a slot in place of each tensor, its other leaves
            copied (a ``BytesIO`` as a new buffer, other objects deep-copied).
    """

    paths: list[tuple[str, ...]]
    tensors: list[torch.Tensor]
    skeleton: Any

    def names(self, indices: list[int]) -> list[str]:
        """The dotted paths of the tensors at ``indices``."""
        return [".".join(self.paths[i]) for i in indices]

    def under(self, pattern: tuple[str, ...] | None) -> list[bool]:
        """For each tensor, whether its path starts with ``pattern`` (``"*"`` matches any
        key; ``None`` matches nothing)."""
        if pattern is None:
            return [False] * len(self.paths)
        n = len(pattern)
        return [
            len(path) >= n and all(p in ("*", key) for p, key in zip(pattern, path, strict=False))
            for path in self.paths
        ]


def flatten(value: Any) -> Flat:
    """Take a state tree (dicts, lists, tuples, tensors, plain values) apart, in one visit."""
    paths: list[tuple[str, ...]] = []
    tensors: list[torch.Tensor] = []

    def visit(item: Any, path: tuple[str, ...]) -> Any:
        if isinstance(item, torch.Tensor):
            paths.append(path)
            tensors.append(item)
            return _Slot(len(tensors) - 1)
        if type(item) is dict:
            return {key: visit(child, (*path, str(key))) for key, child in item.items()}
        if type(item) is list:
            return [visit(child, (*path, str(i))) for i, child in enumerate(item)]
        if isinstance(item, dict | list):
            # A subclass (OrderedDict, defaultdict) is copied as itself, its items replaced.
            copied = copy.copy(item)
            for key in item.keys() if isinstance(item, dict) else range(len(item)):
                copied[key] = visit(item[key], (*path, str(key)))
            return copied
        if isinstance(item, tuple):
            items = [visit(child, (*path, str(i))) for i, child in enumerate(item)]
            if type(item) is tuple:
                return tuple(items)
            # A namedtuple takes its fields, torch.Size and other subclasses an iterable.
            return type(item)(*items) if hasattr(item, "_fields") else type(item)(items)
        if isinstance(item, _ATOMIC):
            return item
        if isinstance(item, io.BytesIO):
            return io.BytesIO(item.getbuffer())
        return copy.deepcopy(item)

    skeleton = visit(value, ())
    return Flat(paths, tensors, skeleton)


def fill(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """The skeleton of :func:`flatten` with ``tensors[i]`` in slot ``i`` (filled in place;
    a skeleton is filled once)."""
    if isinstance(skeleton, _Slot):
        return tensors[skeleton.position]
    if isinstance(skeleton, dict):
        for key, child in skeleton.items():
            skeleton[key] = fill(child, tensors)
        return skeleton
    if isinstance(skeleton, list):
        skeleton[:] = [fill(child, tensors) for child in skeleton]
        return skeleton
    if isinstance(skeleton, tuple) and type(skeleton) is not torch.Size:
        items = [fill(child, tensors) for child in skeleton]
        if type(skeleton) is tuple:
            return tuple(items)
        return type(skeleton)(*items) if hasattr(skeleton, "_fields") else type(skeleton)(items)
    return skeleton
