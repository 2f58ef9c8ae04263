"""``Config.load_path``: reading files, their ``import`` key, and merging."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pytorch_pfn_extras.config._errors import CircularReferenceError

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
    if not isinstance(tree, Mapping) or "import" not in tree:
        return tree
    imports = tree["import"]
    if isinstance(imports, str):
        imports = [imports]
    elif not (isinstance(imports, list) and all(isinstance(name, str) for name in imports)):
        message = f"{path}: 'import' must be a file name or a list of file names, got {imports!r}"
        raise ValueError(message)
    merged: Any = {}
    directory = os.path.dirname(path)
    for name in imports:
        sub_path = os.path.join(directory, name)
        sub = _load(sub_path, loader, (*history, path))
        if not isinstance(sub, Mapping):
            message = (
                f"{sub_path} (imported by {path}) must hold a mapping at its top level to be "
                f"merged, got a {type(sub).__name__}"
            )
            raise ValueError(message)
        merged = merge(merged, sub)
    return merge(merged, {key: value for key, value in tree.items() if key != "import"})


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
            raise ValueError(message) from exc


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
