"""The LogReport's log formats (json, json-lines, yaml): encoding entries, reading a log back."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import IO, Any, NamedTuple

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


class _Record(NamedTuple):
    """A readable record of a json-lines or yaml log: ``data[start:end]``, from line ``line``.

    ``entry`` is what it holds, or ``None`` where it was only checked (see :func:`_scan`).
    """

    start: int
    end: int
    line: int
    entry: dict[str, Any] | None


class _Damage(NamedTuple):
    """A record of a log that cannot be read: the lines it spans (``data``, as in the file),
    the first of them (1-based) and why; ``torn`` when the file ends inside it."""

    line: int
    data: bytes
    reason: str
    torn: bool


class _Scan(NamedTuple):
    """A json-lines or yaml log, record by record: the readable ones and the damaged ones."""

    records: list[_Record]
    damaged: list[_Damage]


_TORN = "torn: the file ends inside this record (a write cut short)"

# A yaml record as _yaml_line writes it: plain keys, plain or numeric values, one flow
# mapping. Every line it matches is a list of one mapping for PyYAML (the tests check it
# with lines drawn from the pattern), so checking a log needs no parse for such a line: a
# few microseconds where libyaml takes about a hundred.
_YAML_NAME = rb"[A-Za-z_][A-Za-z0-9_./-]*"
_YAML_VALUE = rb"(?:[A-Za-z_][A-Za-z0-9_./-]*|-?[0-9][0-9.e+-]*|-?\.inf|\.nan)"
_YAML_ITEM = _YAML_NAME + rb": " + _YAML_VALUE
_YAML_FAST_LINE = re.compile(rb"- \{(?:" + _YAML_ITEM + rb"(?:, " + _YAML_ITEM + rb")*)?\}\n\Z")


def _split(data: bytes, fmt: str) -> tuple[list[tuple[int, int, int]], _Damage | None]:
    """The complete records of a json-lines or yaml log, as ``(start, end, line)``, and
    the torn last one (``None`` if the file ends with a complete record).

    A record is complete when its final newline is there: a process killed while
    writing it leaves it without one. A yaml record is a ``- `` line and its indented
    continuation lines (the block style of older logs). Blank lines, and the ``[]`` of
    an empty yaml log, are no records.
    """
    spans: list[tuple[int, int, int]] = []
    start = end = 0
    line = first = 1
    while (newline := data.find(b"\n", end)) >= 0:
        if not (fmt == "yaml" and data[end : end + 1] in (b" ", b"\t") and end > start):
            spans.append((start, end, first))
            start, first = end, line
        end = newline + 1
        line += 1
    spans.append((start, end, first))
    records = [span for span in spans if data[span[0] : span[1]].strip() not in (b"", b"[]")]
    tail = data[end:]
    torn = _Damage(line, tail, _TORN, torn=True) if tail.strip() else None
    return records, torn


def _parse_record(record: bytes, fmt: str) -> dict[str, Any]:
    """The entry of a json-lines or yaml record.

    Raises:
        ValueError: The record is not UTF-8, not JSON or YAML, or holds something else
            than one entry (a JSON object; a YAML list of one mapping); the message says
            which.
    """
    try:
        text = record.decode()
    except UnicodeDecodeError as error:
        message = f"not UTF-8: {error.reason} at byte {error.start + 1}"
        raise ValueError(message) from None
    if fmt == "json-lines":
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as error:
            message = f"not JSON: {error.msg} at column {error.colno}"
            raise ValueError(message) from None
        if not isinstance(entry, dict):
            message = f"a JSON {type(entry).__name__} where an entry (an object) was expected"
            raise ValueError(message)
        return entry
    yaml = _import_yaml()
    try:
        # libyaml's parser where PyYAML has it: the same values, about 10 times faster.
        loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        # Without the marks: their lines count from the record, not from the file.
        lines = [line.strip() for line in str(error).splitlines()]
        message = "not YAML: " + " ".join(line for line in lines if not line.startswith("in "))
        raise ValueError(message) from None
    if not (isinstance(loaded, list) and len(loaded) == 1 and isinstance(loaded[0], dict)):
        message = f"YAML {loaded!r:.60} where an entry (a list of one mapping) was expected"
        raise ValueError(message)
    return loaded[0]


def _scan(data: bytes, fmt: str, *, parse: bool = True) -> _Scan:
    """Read a json-lines or yaml log record by record.

    Args:
        data: The content of the log.
        fmt: ``'json-lines'`` or ``'yaml'``.
        parse: Give every readable record its entry. When ``False``, a yaml record in
            the fast form of :func:`_yaml_line` is only checked (its entry is ``None``).
    """
    spans, torn = _split(data, fmt)
    records: list[_Record] = []
    damaged: list[_Damage] = []
    for start, end, line in spans:
        record = data[start:end]
        if not parse and fmt == "yaml" and _YAML_FAST_LINE.match(record):
            records.append(_Record(start, end, line, None))
            continue
        try:
            entry = _parse_record(record, fmt)
        except ValueError as error:
            damaged.append(_Damage(line, record, str(error), torn=False))
        else:
            records.append(_Record(start, end, line, entry))
    if torn is not None:
        damaged.append(torn)
    return _Scan(records, damaged)


# Where an entry of a JSON log starts: its own line, indented by 4 (json.dumps(indent=4),
# also PPE 0.9's layout); nested objects are indented further, strings hold no newline.
_JSON_ENTRY_START = re.compile(r"^    \{", re.MULTILINE)


def _scan_json(data: bytes) -> tuple[list[dict[str, Any]], list[_Damage]]:
    """The readable entries of a JSON array log, and its damaged ones.

    An entry that cannot be read is damaged up to where the next entry starts (its own
    line, as LogReport writes them), and the entries after it are read. A file that
    ends before its closing ``]`` was torn; a torn entry is damaged, a missing ``]``
    alone is not (every entry is complete).
    """
    try:
        loaded = json.loads(data)
    except ValueError:
        pass
    else:
        if isinstance(loaded, list) and all(isinstance(entry, dict) for entry in loaded):
            return loaded, []
    # Lone surrogates stand for the bytes that are not UTF-8, so that a damaged part
    # encodes back to the very bytes of the file.
    text = data.decode("utf-8", errors="surrogateescape")
    size = len(text.rstrip())
    closed = text[size - 1 : size] == "]"
    limit = size - 1 if closed else len(text)
    position = len(text) - len(text.lstrip())
    if position == len(text):
        return [], []
    if text[position] != "[":
        whole = _Damage(_line_of(text, position), data, "not a JSON array", torn=False)
        return [], [whole]
    entries: list[dict[str, Any]] = []
    damaged: list[_Damage] = []
    position += 1
    while True:
        while position < limit and text[position] in " \t\r\n,":
            position += 1
        if position >= limit:
            return entries, damaged
        read = _json_entry_at(text, position)
        if isinstance(read, tuple):
            entries.append(read[0])
            position = read[1]
            continue
        following = _JSON_ENTRY_START.search(text, position + 1, limit)
        stop = following.start() if following is not None else limit
        line_start = text.rfind("\n", 0, position) + 1
        start = line_start if not text[line_start:position].strip() else position
        torn = following is None and not closed
        part = text[start:stop].encode(errors="surrogateescape")
        damaged.append(_Damage(_line_of(text, position), part, _TORN if torn else read, torn))
        position = stop


_JSON_DECODER = json.JSONDecoder()


def _json_entry_at(text: str, position: int) -> tuple[dict[str, Any], int] | str:
    """The entry of a JSON log at ``position`` and where it ends, or why there is none."""
    try:
        entry, stop = _JSON_DECODER.raw_decode(text, position)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg} at line {error.lineno} column {error.colno}"
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__} where an entry (an object) was expected"
    if not text[position:stop].isascii():
        try:
            text[position:stop].encode()
        except UnicodeEncodeError:  # a lone surrogate stands for a byte that is not UTF-8
            return "not UTF-8"
    return entry, stop


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _entry_iteration(entry: Any) -> int | None:
    value = entry.get("iteration") if isinstance(entry, dict) else None
    return value if is_int(value) else None


def _read_log(data: bytes, fmt: str) -> tuple[list[dict[str, Any]], list[_Damage]]:
    """The readable entries of a log, and its damaged records."""
    if fmt == "json":
        return _scan_json(data)
    scan = _scan(data, fmt)
    return [record.entry for record in scan.records if record.entry is not None], scan.damaged


def _damaged_records(data: bytes, fmt: str) -> list[_Damage]:
    """The damaged records of a log (checked as cheaply as the format allows)."""
    if fmt == "json":
        return _scan_json(data)[1]
    return _scan(data, fmt, parse=False).damaged


def _write_entries(
    entries: list[dict[str, Any]], fileobj: IO[bytes], fmt: str = "json", **kwargs: Any
) -> None:
    # The writer gets the entries themselves as its target (a TensorBoardWriter plots the
    # last one); file writers encode them with this savefun.
    fileobj.write(_encode(entries, fmt))
