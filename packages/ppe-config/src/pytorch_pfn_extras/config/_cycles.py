"""Configs are trees: finding a dict or list that contains itself."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

from pytorch_pfn_extras.config._path import KeyPath, format_path

# Only the containers a config walks (`Config._eval`, the import expansion) can close a cycle.
_CONTAINERS = (dict, list, tuple, Mapping)  # the common types first: `Mapping` is slower
_SCALARS = frozenset({str, int, float, bool, type(None)})
# Marks, in `find_cycle`'s work list, the point where a container's children are all walked.
_LEAVE: Any = object()


class Cycle(NamedTuple):
    """A container that contains itself: the value at ``at`` is the container at ``encloser``,
    an ancestor of ``at`` (or the root, ``()``)."""

    at: KeyPath
    encloser: KeyPath
    kind: str  # the container's type name, for messages

    def describe(self) -> str:
        """The cycle and the rule it breaks, for an error message."""
        return (
            f"the config contains itself: the value at {format_path(self.at)} is the "
            f"{self.kind} at {format_path(self.encloser)} that encloses it; a config must be a "
            "tree: a dict or list may be used in several places (a YAML anchor and its "
            "aliases) but may not contain itself"
        )


def find_cycle(tree: Any) -> Cycle | None:
    """The first place, depth first in key order, where ``tree`` contains one of the dicts or
    lists (or tuples) that enclose it; ``None`` for a tree.

    Shared values (a YAML anchor used twice) are not cycles, and each is walked once, so the
    cost is linear in the number of distinct containers. The walk is iterative: a deep tree
    does not exhaust the recursion limit here.
    """
    if not isinstance(tree, _CONTAINERS):
        return None
    path: list[Hashable] = []  # the key path of the container being walked
    open_at: dict[int, int] = {id(tree): 0}  # containers on ``path``: id -> depth
    done: set[int] = set()  # containers walked completely: no cycle below them
    todo: list[tuple[Hashable, Any]] = [(_LEAVE, tree)]
    _push_children(tree, todo)
    while todo:
        key, node = todo.pop()
        ident = id(node)
        if key is _LEAVE:
            del open_at[ident]
            done.add(ident)
            if path:
                path.pop()
            continue
        if ident in done:
            continue
        depth = open_at.get(ident)
        if depth is not None:
            return Cycle((*path, key), tuple(path[:depth]), type(node).__name__)
        path.append(key)
        open_at[ident] = len(path)
        todo.append((_LEAVE, node))
        _push_children(node, todo)
    return None


def _push_children(node: Any, todo: list[tuple[Hashable, Any]]) -> None:
    """Append the (key, child) pairs of ``node`` whose child is a container, last key first (so
    they are popped in key order). Scalars of the types a parser returns are skipped before the
    slower ``Mapping`` check: this is the hot loop of ``benchmarks/config_eval.py``'s load."""
    pairs = node.items() if isinstance(node, Mapping) else enumerate(node)
    children = [
        (key, child)
        for key, child in pairs
        if type(child) not in _SCALARS and isinstance(child, _CONTAINERS)
    ]
    todo.extend(reversed(children))
