"""``Config.load_path``: reading files, their ``import`` key, and merging."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pytorch_pfn_extras.config._cycles import find_cycle
from pytorch_pfn_extras.config._errors import (
    CircularReferenceError,
    ConfigTypeError,
    ConfigValueError,
)
from pytorch_pfn_extras.config._path import (
    MISSING,
    ChildNotFound,
    KeyPath,
    child_key,
    dict_key,
    format_path,
)

_YAML_SUFFIXES = (".yaml", ".yml")
_YAML_STREAM_LOADERS = ("safe_load", "full_load", "unsafe_load")


def load_tree(path: str, loader: Callable[[str], Any] | None) -> Any:
    """Read ``path`` and the files it imports; return the merged raw tree."""
    return _load(path, loader, ())


def merge(base: Any, override: Any) -> Any:
    """Deep-merge ``override`` onto ``base`` (neither is modified).

    Dicts merge key by key; anything else in ``override`` replaces what ``base`` has. A dict
    whose ``type`` differs from the one it overrides replaces it whole, so that arguments of
    one type never leak into another (``{type: SGD, momentum: ..}`` -> ``{type: Adam}``).
    """
    if not (isinstance(base, Mapping) and isinstance(override, Mapping)):
        return override
    if "type" in override and override["type"] != base.get("type"):
        return override
    merged = dict(base)
    for key, value in override.items():
        merged[key] = merge(base[key], value) if key in base else value
    return merged


def _load(path: str, loader: Callable[[str], Any] | None, history: tuple[str, ...]) -> Any:
    real = os.path.realpath(path)
    reals = [os.path.realpath(p) for p in history]
    if real in reals:
        cycle = " -> ".join([*history[reals.index(real) :], path])
        message = f"circular import: {cycle}"
        raise CircularReferenceError(message, path=path, trace=history)
    tree = _read(path, loader, history[-1] if history else None)
    try:
        return _expand(tree, _File(path, loader, (*history, path)), ())
    except RecursionError:
        # Looked for only now (a walk of the whole tree costs 15% of a large file's load): a
        # tree that contains itself (a YAML alias inside its own anchor) recurses forever.
        contained = find_cycle(tree)
        if contained is None:
            raise
        message = f"{path}: {contained.describe()}"
        raise ConfigValueError(message, path=format_path(contained.at)) from None


class _File(NamedTuple):
    """The file whose tree `_expand` walks: imports are relative to it, and it joins the chain
    of importing files that detects cycles."""

    path: str
    loader: Callable[[str], Any] | None
    history: tuple[str, ...]


def _expand(node: Any, file: _File, where: KeyPath) -> Any:
    """Resolve every ``import`` key in ``node`` (at ``where`` in ``file``), at any depth.

    Returns ``node`` itself when it holds no import, so a config without imports is not copied.
    """
    if isinstance(node, Mapping):
        siblings = {
            key: _expand(value, file, (*where, key))
            for key, value in node.items()
            if key != "import"
        }
        if "import" in node:
            return _import(node["import"], siblings, file, where)
        unchanged = all(siblings[key] is value for key, value in node.items())
        return node if unchanged else siblings
    if isinstance(node, list):
        items = [_expand(value, file, (*where, i)) for i, value in enumerate(node)]
        return node if all(new is old for new, old in zip(items, node)) else items
    return node


def _import(imports: Any, siblings: dict[Any, Any], file: _File, where: KeyPath) -> Any:
    """Merge the files named by an ``import`` value, in order, then ``siblings`` on top.

    A sibling key that is a path (``"model/lr"``; any key when the file holds a list, ``"0"``,
    ``"0/units"``) overrides the value at that path of the imported content.
    """
    at = format_path((*where, "import"))
    names = [imports] if isinstance(imports, str) else imports
    if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
        message = f"{file.path}: {at} must be a file name or a list of file names, got {imports!r}"
        raise ConfigTypeError(message, path=at)
    files = [os.path.join(os.path.dirname(file.path), name) for name in names]
    if len(files) == 1:
        sub = _load(files[0], file.loader, file.history)
        if not siblings:  # the file's content as it is, even a list
            return sub
        if not isinstance(sub, Mapping):  # a list: the sibling keys are paths into it
            return _override(sub, siblings, _Override(file, at, files[0]))
        subs = [sub]
    else:
        subs = [_load(path, file.loader, file.history) for path in files]
    merged: Any = {}
    for sub_path, sub in zip(files, subs):
        if not isinstance(sub, Mapping):
            keys = ", ".join(map(repr, siblings)) or "none"
            message = (
                f"{sub_path} (imported by {file.path} at {at}) holds a {type(sub).__name__}, "
                f"which cannot be merged with other imports or the sibling keys ({keys}): "
                "only a mapping can"
            )
            raise ConfigTypeError(message, path=at)
        merged = merge(merged, sub)
    keyed = {key: value for key, value in siblings.items() if not _is_path(key)}
    by_path = {key: value for key, value in siblings.items() if _is_path(key)}
    return _override(merge(merged, keyed), by_path, _Override(file, at, ", ".join(files)))


class _Override(NamedTuple):
    """Where sibling path keys are applied, for their error messages."""

    file: _File
    at: str  # the ``import`` key, as a config path
    imported: str  # the imported file(s) whose content the paths point into


def _is_path(key: Any) -> bool:
    return isinstance(key, str) and "/" in key


def _override(node: Any, siblings: Mapping[Any, Any], place: _Override) -> Any:
    """``node`` with each sibling merged in at the path its key names."""
    for key, value in siblings.items():
        components = [part for part in key.split("/") if part] if isinstance(key, str) else [key]
        try:
            node = _merge_at(node, components, value, ())
        except ChildNotFound as missing:
            message = (
                f"{place.file.path}: the key {key!r} beside {place.at} overrides a value of "
                f"{place.imported}, in which {missing.detail}"
            )
            raise missing.kind(message, path=place.at) from None
    return node


def _merge_at(node: Any, components: list[Any], value: Any, where: KeyPath) -> Any:
    """A copy of ``node`` with ``value`` merged onto the value at ``components`` (a key missing
    from a dict is added; a list index must exist)."""
    if not components:
        return merge(node, value)
    first, rest = components[0], components[1:]
    if isinstance(node, Mapping):
        key = dict_key(first, node)
        if key is MISSING:
            for name in reversed(rest):
                value = {name: value}
            return {**node, first: value}
        return {**node, key: _merge_at(node[key], rest, value, (*where, key))}
    index = child_key(node, first, where)  # raises for a bad list index or a scalar
    items = list(node)
    items[index] = _merge_at(node[index], rest, value, (*where, index))
    return items if isinstance(node, list) else tuple(items)


def _read(path: str, loader: Callable[[str], Any] | None, importer: str | None) -> Any:
    try:
        if loader is None:
            if path.lower().endswith(_YAML_SUFFIXES):
                return _read_yaml(path)
            return _read_json(path)
        if _is_stream_loader(loader):
            with open(path, encoding="utf-8") as stream:
                return loader(stream)  # type: ignore[arg-type]
        return loader(path)
    except FileNotFoundError as exc:
        if importer is None:
            raise
        message = f"config file imported by {importer!r} does not exist"
        raise FileNotFoundError(exc.errno, message, path) from None


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as stream:
        try:
            return json.load(stream)
        except json.JSONDecodeError as exc:
            message = f"{path}: invalid JSON: {exc}"
            raise ConfigValueError(message, path="/") from exc


def _read_yaml(path: str) -> Any:
    try:
        import yaml
    except ImportError:
        message = f'reading the YAML file {path!r} needs PyYAML: pip install "ppe-config[yaml]"'
        raise ImportError(message) from None
    with open(path, encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def _is_stream_loader(loader: Callable[..., Any]) -> bool:
    """``json.load`` and PyYAML's loaders parse a stream, not a path: give them the file."""
    if loader is json.load:
        return True
    yaml = sys.modules.get("yaml")
    return yaml is not None and any(
        loader is getattr(yaml, name, None) for name in _YAML_STREAM_LOADERS
    )
