"""Config paths: ``/abs/path``, ``rel/../path``, ``!raw``, ``path.attr``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

from pytorch_pfn_extras.config._errors import (
    ConfigError,
    ConfigIndexError,
    ConfigKeyError,
    ConfigTypeError,
)

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


class ChildNotFound(Exception):
    """Raised by `child_key` and `attribute_or_item`: ``kind`` is the error to report, ``detail``
    says why (callers add which path or reference was being looked up)."""

    def __init__(self, kind: type[ConfigError], detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def child_key(node: Any, comp: Any, where: KeyPath) -> Any:
    """The key (dict) or non-negative index (list, tuple) of the child of ``node`` that path
    component ``comp`` names; ``where`` is the path of ``node``.

    Raises:
        ChildNotFound: With `ConfigKeyError` for a missing key, `ConfigIndexError` for an index
            out of range, `ConfigTypeError` for an index that is not an integer or a ``node``
            that is neither a dict nor a list (the exceptions PPE raises there).
    """
    if isinstance(node, Mapping):
        key = dict_key(comp, node)
        if key is MISSING:
            shown = ", ".join(map(repr, list(node)[:20])) or "none"
            detail = f"{format_path(where)} has no key {comp!r} (its keys: {shown})"
            raise ChildNotFound(ConfigKeyError, detail)
        return key
    if isinstance(node, (list, tuple)):
        index = list_index(comp, len(node))
        if index is MISSING:
            kind = ConfigIndexError if as_int(comp) is not None else ConfigTypeError
            detail = (
                f"{format_path(where)} is a list of {len(node)} items, so {comp!r} is not a "
                f"valid index (expected an integer in [0, {len(node)}))"
            )
            raise ChildNotFound(kind, detail)
        return index
    detail = (
        f"{format_path(where)} is a {type(node).__name__} ({node!r:.60}), not a dict or a "
        f"list, so it has no item {comp!r}"
    )
    raise ChildNotFound(ConfigTypeError, detail)


def attribute_or_item(value: Any, name: str) -> Any:
    """``getattr(value, name)``, else the item ``name`` names (a dict key, a list index such as
    ``'0'`` or ``'-1'``, or ``value[name]``).

    This is one attribute step of a path (``'@/dataset.n_data'``, ``'@/loaders.train'`` on a
    dict, ``'@/layers.0'`` on a list). The attribute wins: ``.keys`` of a dict is its method.

    Raises:
        ChildNotFound: There is neither. As in PPE, its ``kind`` is the error of the item access
            that failed: `ConfigKeyError` for a dict without that key, `ConfigIndexError` for a
            list index out of range, `ConfigTypeError` for a list index that is not an integer or
            a value without items; an object's own ``__getitem__`` error keeps its kind. Its
            ``detail`` continues "the ... object has no attribute 'name'".
    """
    try:
        return getattr(value, name)
    except AttributeError:
        pass
    if isinstance(value, Mapping):
        key = dict_key(name, value)
        if key is MISSING:
            shown = ", ".join(map(repr, list(value)[:20])) or "none"
            raise ChildNotFound(ConfigKeyError, f" nor a key {name!r} (its keys: {shown})")
        return value[key]
    if isinstance(value, (list, tuple)):
        index = list_index(name, len(value))
        if index is MISSING:
            kind = ConfigIndexError if as_int(name) is not None else ConfigTypeError
            detail = f" nor an item {name!r} (its valid indices: [0, {len(value)}))"
            raise ChildNotFound(kind, detail)
        return value[index]
    number = as_int(name)
    failures: list[Exception] = []
    for key in (name,) if number is None else (number, name):
        try:
            return value[key]
        except (LookupError, TypeError) as exc:  # no such item, or no item access at all
            failures.append(exc)
    first = failures[0]  # for a number, what indexing by the int raised
    raise ChildNotFound(_kind_of(first), f" nor an item {name!r} ({type(first).__name__}: {first})")


def _kind_of(failure: Exception) -> type[ConfigError]:
    """The error reported for an item access that raised ``failure``."""
    if isinstance(failure, IndexError):
        return ConfigIndexError
    if isinstance(failure, LookupError):
        return ConfigKeyError
    return ConfigTypeError
