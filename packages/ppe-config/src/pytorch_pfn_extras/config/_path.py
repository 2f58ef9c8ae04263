"""Config paths: ``/abs/path``, ``rel/../path``, ``!raw``, ``path.attr``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

KeyPath = tuple[Hashable, ...]
MISSING: Any = object()


class ParsedPath(NamedTuple):
    """A config path split into its parts.

    ``keys`` is the absolute location in the raw tree (relative paths already resolved, list
    indices still strings), ``attrs`` the attribute names after the last key, ``raw`` whether
    the path started with ``!``.
    """

    raw: bool
    keys: tuple[Hashable, ...]
    attrs: tuple[str, ...]


def format_path(keys: KeyPath) -> str:
    """Render a key tuple as a config path (``()`` is ``/``)."""
    return "/" + "/".join(str(k) for k in keys)


def format_chain(keys: list[KeyPath] | tuple[KeyPath, ...]) -> str:
    return " -> ".join(format_path(k) for k in keys)


def parse_path(text: str, base: KeyPath) -> ParsedPath:
    """Parse ``text``; a relative path starts from ``base`` (the node's container).

    Raises:
        ValueError: The path climbs above the root or has an empty attribute name; the message
            says which part is wrong (callers add the config location).
    """
    raw = text.startswith("!")
    if raw:
        text = text[1:]
    if text.startswith("/"):
        keys: list[Hashable] = []
        text = text[1:]
    else:
        keys = list(base)
    parts = text.split("/") if text else []
    attrs: tuple[str, ...] = ()
    if parts:
        last = parts[-1]
        if "." in last and last not in (".", ".."):
            name, *names = last.split(".")
            if not all(names):
                message = f"empty attribute name in {last!r}"
                raise ValueError(message)
            parts[-1] = name
            attrs = tuple(names)
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not keys:
                message = "'..' climbs above the root"
                raise ValueError(message)
            keys.pop()
        else:
            keys.append(part)
    return ParsedPath(raw, tuple(keys), attrs)


def as_int(comp: Any) -> int | None:
    """``3``, ``'3'`` or ``'-1'`` as an int; anything else (``'1.0'``, ``' 1'``) is None."""
    if isinstance(comp, int) and not isinstance(comp, bool):
        return comp
    if isinstance(comp, str):
        digits = comp[1:] if comp.startswith("-") else comp
        if digits.isascii() and digits.isdigit():
            return int(comp)
    return None


def dict_key(comp: Any, node: Mapping[Any, Any]) -> Any:
    """The key of ``node`` that path component ``comp`` names, or ``MISSING``.

    ``'0'`` also finds an integer key 0 (YAML ``0: x``) and ``0`` a string key ``'0'``.
    """
    if comp in node:
        return comp
    if isinstance(comp, str):
        number = as_int(comp)
        return number if number is not None and number in node else MISSING
    text = str(comp)
    return text if text in node else MISSING


def list_index(comp: Any, size: int) -> Any:
    """The non-negative index that ``comp`` names in a list of ``size``, or ``MISSING``."""
    index = as_int(comp)
    if index is None:
        return MISSING
    if -size <= index < 0:
        index += size
    return index if 0 <= index < size else MISSING
