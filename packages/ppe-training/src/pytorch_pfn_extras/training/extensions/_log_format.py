"""The LogReport's log formats (json, json-lines, yaml): encoding entries, reading a log back."""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping
from typing import IO, Any

from pytorch_pfn_extras.interop import is_int

_FORMATS = ("json", "json-lines", "yaml")


def _infer_format(filename: str) -> str:
    if filename.endswith(".jsonl"):
        return "json-lines"
    if filename.endswith((".yaml", ".yml")):
        return "yaml"
    return "json"


def _json_default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # tensors, NumPy arrays and scalars
    if callable(tolist):
        return tolist()
    message = f"LogReport cannot write a {type(value).__name__} to a JSON log: {value!r}"
    raise TypeError(message)


def _import_yaml() -> Any:
    try:
        import yaml
    except ImportError as error:  # pragma: no cover -- pyyaml is installed in CI
        message = 'LogReport(format="yaml") needs PyYAML: pip install "ppe-training[yaml]"'
        raise ImportError(message) from error
    return yaml


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")


@functools.lru_cache(maxsize=4096)
def _yaml_plain(text: str) -> str | None:
    """``text`` if YAML reads it back as this very string unquoted (in a flow mapping)."""
    if not _PLAIN.match(text):
        return None
    yaml = _import_yaml()
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    return text if tag == "tag:yaml.org,2002:str" else None


def _yaml_scalar(value: Any) -> str | None:
    """``value`` as PyYAML's ``safe_dump`` writes it, for the common types; else ``None``."""
    kind = type(value)
    if kind is float:
        if value != value:
            return ".nan"
        if value in (math.inf, -math.inf):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        # YAML 1.1 floats need a dot: 1e-05 -> 1.0e-05 (as PyYAML's representer does).
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is str:
        return _yaml_plain(value)
    return None


def _yaml_line(entry: Mapping[str, Any]) -> bytes | None:
    """An entry as a ``- {key: value, ...}`` line, if every key and value has a fast form.

    Numbers, booleans, ``None`` and plain strings (the usual entry) take a few
    microseconds this way, where ``yaml.safe_dump`` takes over a hundred; anything
    else returns ``None`` and goes through PyYAML.
    """
    parts = []
    for key, value in entry.items():
        name = _yaml_plain(key) if type(key) is str else None
        text = _yaml_scalar(value)
        if name is None or text is None:
            return None
        parts.append(f"{name}: {text}")
    return ("- {" + ", ".join(parts) + "}\n").encode()


def _encode_entry(entry: Mapping[str, Any], fmt: str) -> bytes:
    """One record of a json-lines or yaml log: a single line ending with a newline."""
    if fmt == "json-lines":
        return json.dumps(entry, default=_json_default).encode() + b"\n"
    line = _yaml_line(entry)
    if line is not None:
        return line
    yaml = _import_yaml()
    plain = json.loads(json.dumps(entry, default=_json_default))
    # A flow mapping on one line, so that a record is complete iff its newline is there.
    text = str(yaml.safe_dump(plain, default_flow_style=True, width=math.inf, sort_keys=False))
    if text.count("\n") != 1:  # a string holding a line break: quote every scalar
        text = str(
            yaml.safe_dump(
                plain, default_flow_style=True, default_style='"', width=math.inf, sort_keys=False
            )
        )
    return b"- " + text.encode()


def _json_item(entry: Mapping[str, Any]) -> bytes:
    """An entry as it appears inside the indented JSON array (without separators)."""
    return json.dumps([entry], indent=4, default=_json_default)[2:-2].encode()


def _encode(entries: list[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "json":
        if not entries:
            return b"[]"
        return b"[\n" + b",\n".join(_json_item(entry) for entry in entries) + b"\n]"
    if fmt == "yaml" and not entries:
        return b"[]\n"
    return b"".join(_encode_entry(entry, fmt) for entry in entries)


def _records(data: bytes, fmt: str) -> list[tuple[int, bytes]]:
    """The complete records of a json-lines or yaml log, as ``(end offset, record)``.

    A record is complete when its final newline is there: a torn last record (a
    process killed while writing it) is left out. A yaml record is a ``- `` line
    and its indented continuation lines (the block style of older logs).
    """
    records: list[tuple[int, bytes]] = []
    start = end = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        if not (fmt == "yaml" and line[:1] in (b" ", b"\t") and end > start):
            if data[start:end].strip():
                records.append((end, data[start:end]))
            start = end
        end += len(line)
    if data[start:end].strip():
        records.append((end, data[start:end]))
    return [(stop, record) for stop, record in records if record.strip() != b"[]"]


def _parse_record(record: bytes, fmt: str) -> Any:
    if fmt == "json-lines":
        return json.loads(record)
    yaml = _import_yaml()
    # libyaml's parser where PyYAML has it: the same values, about 10 times faster to read.
    loaded = yaml.load(record, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return loaded[0] if isinstance(loaded, list) and loaded else None


def _parse_json_array(data: bytes) -> list[Any]:
    """The complete entries of a JSON array log, also when its last write was torn."""
    text = data.decode(errors="replace")
    try:
        loaded = json.loads(text)
    except ValueError:
        pass
    else:
        return list(loaded) if isinstance(loaded, list) else []
    decoder = json.JSONDecoder()
    entries: list[Any] = []
    position = text.find("[") + 1
    while position > 0:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            entry, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        entries.append(entry)
    return entries


def _entry_iteration(entry: Any) -> int | None:
    value = entry.get("iteration") if isinstance(entry, dict) else None
    return value if is_int(value) else None


def _read_log(path: str | os.PathLike[str], format: str | None = None) -> list[Any]:
    fmt = _infer_format(os.fspath(path)) if format is None else format
    with open(path, "rb") as f:
        data = f.read()
    if fmt == "json":
        return _parse_json_array(data)
    return [_parse_record(record, fmt) for _, record in _records(data, fmt)]


def _write_entries(
    entries: list[dict[str, Any]], fileobj: IO[bytes], fmt: str = "json", **kwargs: Any
) -> None:
    # The writer gets the entries themselves as its target (a TensorBoardWriter plots the
    # last one); file writers encode them with this savefun.
    fileobj.write(_encode(entries, fmt))
