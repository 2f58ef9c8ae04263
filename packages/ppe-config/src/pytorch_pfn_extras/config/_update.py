"""``Config.update_via_args``: override raw values, casting strings to the existing type."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytorch_pfn_extras.config._errors import ConfigKeyError, ConfigTypeError, ConfigValueError
from pytorch_pfn_extras.config._path import ChildNotFound, child_key, parse_path


def update_tree(tree: Any, path: str, value: Any) -> Any:
    """Return a copy of ``tree`` with the value at ``path`` replaced (``tree`` is unchanged:
    only the containers on the way are copied)."""
    if not isinstance(path, str):
        message = f"update_via_args: paths are strings such as '/optimizer/lr', got {path!r}"
        raise ConfigTypeError(message, path=str(path))
    try:
        parsed = parse_path(path, ())
    except ValueError as exc:
        message = f"update_via_args: invalid config path {path!r}: {exc}"
        raise ConfigKeyError(message, path=path) from None
    if parsed.raw or parsed.attrs or not parsed.keys:
        message = (
            f"update_via_args: expected the path of a value such as '/optimizer/lr', got "
            f"{path!r} (no '!', no attribute access, not the root)"
        )
        raise ConfigKeyError(message, path=path)
    nodes = [tree]
    keys: list[Any] = []
    for comp in parsed.keys:
        node = nodes[-1]
        try:
            k = child_key(node, comp, tuple(keys))
        except ChildNotFound as missing:
            hint = ""
            if isinstance(node, str) and node.startswith("@"):
                hint = " (update the path the reference points to instead of going through it)"
            message = (
                f"update_via_args: config path {path!r} does not exist in the raw config: "
                f"{missing.detail}{hint}"
            )
            raise missing.kind(message, path=path) from None
        keys.append(k)
        nodes.append(node[k])
    new = _cast(path, nodes[-1], value)
    for node, k in zip(reversed(nodes[:-1]), reversed(keys)):
        if isinstance(node, Mapping):
            new = {**node, k: new}
        elif isinstance(node, list):
            new = [*node[:k], new, *node[k + 1 :]]
        else:
            new = (*node[:k], new, *node[k + 1 :])
    return new


def _cast(path: str, old: Any, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    expected = type(old).__name__
    if isinstance(old, bool):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        message = (
            f"update_via_args: {path} holds a bool, so its new value must be 'true' or "
            f"'false', got {value!r}"
        )
        raise ConfigValueError(message, path=path)
    if isinstance(old, (int, float)):
        try:
            return type(old)(value)
        except ValueError:
            message = (
                f"update_via_args: {path} holds {expected} {old!r}, and {value!r} is not "
                f"a valid {expected}"
            )
            raise ConfigValueError(message, path=path) from None
    if isinstance(old, str):
        return value
    if old is None or isinstance(old, (Mapping, list, tuple)):
        try:
            new = json.loads(value)
        except ValueError:
            message = (
                f"update_via_args: {path} holds {old!r:.60}, so its new value is parsed as "
                f"JSON, and {value!r} is not valid JSON"
            )
            raise ConfigValueError(message, path=path) from None
        if isinstance(old, Mapping) and not isinstance(new, dict):
            message = f"update_via_args: {path} holds a dict; expected a JSON object, got {value!r}"
            raise ConfigValueError(message, path=path)
        if isinstance(old, (list, tuple)) and not isinstance(new, list):
            message = f"update_via_args: {path} holds a list; expected a JSON array, got {value!r}"
            raise ConfigValueError(message, path=path)
        return tuple(new) if isinstance(old, tuple) else new
    message = (
        f"update_via_args: {path} holds a value of type {expected}, which a string cannot be "
        "cast to; pass the new value itself instead of a string"
    )
    raise ConfigTypeError(message, path=path)
