"""LogReport's log survives damage: a torn or damaged record is set aside in a side file next
to the log, with a warning naming the file and the line, and the resumed run goes on with one
valid log holding each entry once."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions
from pytorch_pfn_extras.training.extensions import LogReport
from pytorch_pfn_extras.training.extensions._log_format import _YAML_FAST_LINE
from pytorch_pfn_extras.writing import SimpleWriter, ThreadWriter

MODES = [
    ("log.json", False),
    ("log.jsonl", False),
    ("log.yaml", False),
    ("log.jsonl", True),
    ("log.yaml", True),
]


class _CopyingWriter(SimpleWriter):
    """A user's writer: it does not write in place, so LogReport goes through its calls."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        super().__call__(*args, **kwargs)


def _train(out: Path, filename: str, append: bool, stop: int, writer: Any = None) -> int:
    """Train to ``stop`` iterations (2 an epoch), resuming from the newest snapshot; return
    the iteration training started from."""
    manager = ExtensionsManager(
        {}, {}, stop // 2, iters_per_epoch=2, out_dir=str(out), writer=writer
    )
    manager.extend(LogReport(filename=filename, append=append, trigger=(1, "iteration")))
    manager.extend(extensions.snapshot(n_retains=1, autoload=True), trigger=(1, "epoch"))
    started = None
    while not manager.stop_trigger:
        with manager.run_iteration():
            started = manager.iteration if started is None else started
            reporting.report({"loss": 1.0 / (manager.iteration + 1)})
    manager.finalize()
    return started if started is not None else stop


def _strict_load(path: Path) -> list[Any]:
    """The log as a strict reader sees it: the whole file must be valid."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return list(json.loads(data))
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in data.splitlines()]
    return list(yaml.safe_load(data))


class _Damage(NamedTuple):
    """A damaged log: its bytes, what must land in the side file, the line the warning
    names, the iterations LogReport.read returns, and whether it is a torn tail."""

    data: bytes
    side: bytes
    line: int
    readable: list[int]
    torn: bool


def _json_entry_lines(data: bytes, index: int) -> tuple[int, int]:
    """First line (0-based) and end of the ``index``-th entry of a JSON log."""
    lines = data.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(b"    {")]
    return starts[index], starts[index + 1]


def _torn_tail(data: bytes, suffix: str) -> _Damage:
    lines = len(data.splitlines())
    if suffix == ".json":  # the next entry was being written over the closing "\n]"
        tail = b'    {\n        "loss": 0.2,\n        "ep'
        return _Damage(data[:-2] + b",\n" + tail, tail, lines, [1, 2, 3, 4], torn=True)
    tail = b'{"loss": 0.2, "ep' if suffix == ".jsonl" else b"- {loss: 0.2, ep"
    return _Damage(data + tail, tail, lines + 1, [1, 2, 3, 4], torn=True)


def _corrupt_last(data: bytes, suffix: str) -> _Damage:
    lines = len(data.splitlines())
    if suffix == ".json":
        bad = b'    {\n        "epoch": 1, "iter\n    }\n'
        return _Damage(data[:-2] + b",\n" + bad + b"]", bad, lines, [1, 2, 3, 4], torn=False)
    bad = b'{"epoch": 1, "iter\n' if suffix == ".jsonl" else b"- {epoch: 1, iter\n"
    return _Damage(data + bad, bad, lines + 1, [1, 2, 3, 4], torn=False)


def _garbage_last(data: bytes, suffix: str) -> _Damage:
    bad = b"\x00\x9c\xff\r garbage \x1b\n"  # not UTF-8, and a carriage return inside
    lines = len(data.splitlines())
    if suffix == ".json":
        return _Damage(data[:-2] + b",\n" + bad + b"]", bad, lines, [1, 2, 3, 4], torn=False)
    return _Damage(data + bad, bad, lines + 1, [1, 2, 3, 4], torn=False)


def _corrupt_middle(data: bytes, suffix: str) -> _Damage:
    lines = data.splitlines(keepends=True)
    if suffix == ".json":  # a line inside the second entry
        first, end = _json_entry_lines(data, 1)
        lines[first + 2] = b'        "epoch": \xff\x00,\n'
        damaged = b"".join(lines)
        return _Damage(damaged, b"".join(lines[first:end]), first + 1, [1, 3, 4], torn=False)
    lines[1] = b'{"loss": 0.5, "epoch": [\n' if suffix == ".jsonl" else b"- {loss: 0.5, epoch: [\n"
    return _Damage(b"".join(lines), lines[1], 2, [1, 3, 4], torn=False)


DAMAGES: dict[str, Callable[[bytes, str], _Damage]] = {
    "torn tail": _torn_tail,
    "corrupt last line": _corrupt_last,
    "garbage last line": _garbage_last,
    "corrupt middle line": _corrupt_middle,
}


def _damage(path: Path, kind: str) -> _Damage:
    damage = DAMAGES[kind](path.read_bytes(), path.suffix)
    path.write_bytes(damage.data)
    return damage


def _warning(path: Path, line: int, side: Path) -> str:
    return rf"{re.escape(str(path))} .*\(line {line}: .*set aside in {re.escape(str(side))} "


@pytest.mark.parametrize("kind", list(DAMAGES))
@pytest.mark.parametrize(("filename", "append"), MODES)
def test_a_resumed_run_sets_a_damaged_record_aside_and_logs_each_entry_once(
    tmp_path: Path, filename: str, append: bool, kind: str
) -> None:
    path, side = tmp_path / filename, tmp_path / f"{filename}.damaged-1"
    _train(tmp_path, filename, append, 4)
    damage = _damage(path, kind)

    with pytest.warns(UserWarning, match=_warning(path, damage.line, side)):
        assert _train(tmp_path, filename, append, 6) == 4  # resumed from snapshot_iter_4

    assert side.read_bytes() == damage.side
    iterations = [entry["iteration"] for entry in _strict_load(path)]
    if append and kind == "corrupt middle line":  # the damaged entry is in the side file
        assert iterations == [1, 3, 4, 5, 6]
    else:  # a rewritten log comes back whole from the snapshot
        assert iterations == [1, 2, 3, 4, 5, 6]
    assert LogReport.read(path) == _strict_load(path)
    # Autoload and retention take the side file for no snapshot.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [filename, side.name, "snapshot_iter_6"]
    )
    assert _train(tmp_path, filename, append, 6) == 6


@pytest.mark.parametrize("writer", [_CopyingWriter, ThreadWriter])
@pytest.mark.parametrize("kind", ["torn tail", "corrupt middle line"])
@pytest.mark.parametrize(("filename", "append"), [("log.json", False), *MODES[3:]])
def test_damage_is_set_aside_through_a_writer_that_does_not_write_in_place(
    tmp_path: Path, filename: str, append: bool, kind: str, writer: type
) -> None:
    path, side = tmp_path / filename, tmp_path / f"{filename}.damaged-1"
    _train(tmp_path, filename, append, 4, writer())
    damage = _damage(path, kind)

    with pytest.warns(UserWarning, match=_warning(path, damage.line, side)):
        _train(tmp_path, filename, append, 6, writer())

    assert side.read_bytes() == damage.side
    expected = [1, 3, 4, 5, 6] if append and kind == "corrupt middle line" else [1, 2, 3, 4, 5, 6]
    assert [entry["iteration"] for entry in _strict_load(path)] == expected


@pytest.mark.parametrize(("filename", "append"), MODES)
def test_a_later_damage_goes_to_a_new_side_file(
    tmp_path: Path, filename: str, append: bool
) -> None:
    path = tmp_path / filename
    _train(tmp_path, filename, append, 4)
    first = _damage(path, "corrupt last line")
    with pytest.warns(UserWarning, match=r"damaged-1 "):
        _train(tmp_path, filename, append, 6)
    second = _damage(path, "garbage last line")
    with pytest.warns(UserWarning, match=_warning(path, second.line, Path(f"{path}.damaged-2"))):
        _train(tmp_path, filename, append, 8)

    assert (tmp_path / f"{filename}.damaged-1").read_bytes() == first.side
    assert (tmp_path / f"{filename}.damaged-2").read_bytes() == second.side
    assert [entry["iteration"] for entry in _strict_load(path)] == list(range(1, 9))


@pytest.mark.parametrize("filename", ["log.jsonl", "log.yaml"])
def test_a_fresh_appending_run_sets_damage_aside_before_it_appends(
    tmp_path: Path, filename: str
) -> None:
    path, side = tmp_path / filename, tmp_path / f"{filename}.damaged-1"
    _train(tmp_path, filename, True, 4)
    damage = _damage(path, "corrupt middle line")
    log_report = LogReport(filename=filename, append=True, trigger=(1, "iteration"))
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    manager.extend(log_report)  # no snapshot: a new run appends to the old log

    with pytest.warns(UserWarning, match=_warning(path, 2, side)):
        while not manager.stop_trigger:
            with manager.run_iteration():
                reporting.report({"loss": 1.0})

    assert side.read_bytes() == damage.side
    assert [entry["iteration"] for entry in _strict_load(path)] == [1, 3, 4, 1, 2]


@pytest.mark.parametrize("kind", list(DAMAGES))
@pytest.mark.parametrize("filename", ["log.json", "log.jsonl", "log.yaml"])
def test_read_skips_a_damaged_record_with_a_warning_and_a_torn_tail_silently(
    tmp_path: Path, filename: str, kind: str
) -> None:
    path = tmp_path / filename
    _train(tmp_path, filename, filename != "log.json", 4)
    damage = _damage(path, kind)

    if damage.torn:  # also what a reader sees of an entry being written
        entries = LogReport.read(path)
    else:
        match = rf"{re.escape(str(path))} .*\(line {damage.line}: .*{len(damage.readable)} entries"
        with pytest.warns(UserWarning, match=match):
            entries = LogReport.read(path)

    assert [entry["iteration"] for entry in entries] == damage.readable
    assert path.read_bytes() == damage.data  # reading changes nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == [filename, "snapshot_iter_4"]


def test_read_rejects_an_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("[]")
    with pytest.raises(ValueError, match=r"format must be one of .* got 'csv'"):
        LogReport.read(tmp_path / "log", format="csv")


@settings(max_examples=150, deadline=None)
@given(st.from_regex(_YAML_FAST_LINE, fullmatch=True))
def test_every_yaml_line_checked_without_parsing_is_one_entry_for_pyyaml(line: bytes) -> None:
    # A resumed run checks such lines with a pattern instead of PyYAML: it must never
    # accept one that LogReport.read could not read.
    loaded = yaml.safe_load(line)
    assert isinstance(loaded, list) and len(loaded) == 1 and isinstance(loaded[0], dict)


def test_many_damaged_records_all_go_to_the_side_file_and_the_warning_counts_them(
    tmp_path: Path,
) -> None:
    path, side = tmp_path / "log.jsonl", tmp_path / "log.jsonl.damaged-1"
    _train(tmp_path, "log.jsonl", True, 4)
    lines = path.read_bytes().splitlines(keepends=True)
    garbage = [b"garbage %d\n" % i for i in range(7)]
    path.write_bytes(b"".join(lines[:2] + garbage + lines[2:]))

    match = r"\(line 3: not JSON: .*; line 7: .*; 7 records in all\); they are set aside"
    with pytest.warns(UserWarning, match=match):
        _train(tmp_path, "log.jsonl", True, 6)

    assert side.read_bytes() == b"".join(garbage)
    assert [entry["iteration"] for entry in _strict_load(path)] == [1, 2, 3, 4, 5, 6]
