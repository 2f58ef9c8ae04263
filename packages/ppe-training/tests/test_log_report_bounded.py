"""LogReport in long runs: a bounded in-memory log in append mode, the entry count that
PrintReport follows, fast yaml records, and torn tails set aside through any writer."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, PrintReport
from pytorch_pfn_extras.writing import SimpleWriter


class _CopyingWriter(SimpleWriter):
    """A user's writer: it does not write in place, so LogReport appends through it."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        super().__call__(*args, **kwargs)


def _manager(out: Path, *extensions: Any) -> ExtensionsManager:
    return ExtensionsManager(
        {}, {}, 10**6, iters_per_epoch=5, out_dir=str(out), extensions=list(extensions)
    )


def _steps(manager: ExtensionsManager, count: int) -> None:
    for _ in range(count):
        with manager.run_iteration():
            reporting.report({"loss": 1.0 / (manager.iteration + 1)})


def _printed_iterations(out: io.StringIO) -> list[int]:
    rows = [line.split() for line in out.getvalue().splitlines()]
    return [int(row[1]) for row in rows if row and row[0] != "epoch"]


@pytest.mark.parametrize("filename", ["log.jsonl", "log.yaml"])
def test_append_mode_keeps_the_latest_entries_in_memory_and_all_on_disk(
    tmp_path: Path, filename: str
) -> None:
    log_report = LogReport(filename=filename, append=True, trigger=(1, "iteration"))
    assert log_report.append_log_maxlen == 1000
    log_report.append_log_maxlen = 10
    out = io.StringIO()
    manager = _manager(tmp_path, log_report, PrintReport(["epoch", "iteration"], out=out))
    _steps(manager, 25)
    on_disk = LogReport.read(tmp_path / filename)
    assert [entry["iteration"] for entry in on_disk] == list(range(1, 26))
    assert log_report.log == on_disk[-10:]
    assert log_report.entry_count == 25
    assert _printed_iterations(out) == list(range(1, 26))  # every entry printed once


def test_the_log_is_whole_without_append(tmp_path: Path) -> None:
    log_report = LogReport(filename="log.yaml", trigger=(1, "iteration"))
    log_report.append_log_maxlen = 10
    _steps(_manager(tmp_path, log_report), 25)
    assert len(log_report.log) == log_report.entry_count == 25
    assert log_report.log == LogReport.read(tmp_path / "log.yaml")


@pytest.mark.parametrize("append", [False, True])
def test_print_report_prints_each_entry_once_across_a_resume(tmp_path: Path, append: bool) -> None:
    def run(steps: int, state: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        out = io.StringIO()
        log_report = LogReport(filename="log.jsonl", append=append, trigger=(1, "iteration"))
        manager = _manager(tmp_path, log_report, PrintReport(["epoch", "iteration"], out=out))
        if state is not None:
            manager.load_state_dict(state)
        _steps(manager, steps)
        return _printed_iterations(out), manager.state_dict()

    first, state = run(7, None)
    second, _ = run(5, state)
    assert first + second == list(range(1, 13))
    assert [e["iteration"] for e in LogReport.read(tmp_path / "log.jsonl")] == list(range(1, 13))


_keys = st.one_of(
    st.sampled_from(["loss", "main/loss", "val/acc-top1", "yes", "null", "1", "a: b", "x,y"]),
    st.text(max_size=8),
)
_values = st.one_of(
    st.floats(),
    st.integers(),
    st.booleans(),
    st.none(),
    st.sampled_from(["on", "no", "~", "1.5", "plain", "", " pad", "a\nb", "é"]),
    st.text(max_size=8),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=5))
def test_yaml_records_read_back_as_the_entry(values: dict[str, Any]) -> None:
    import tempfile

    def postprocess(entry: dict[str, Any]) -> None:
        entry.clear()
        entry.update(values)

    with tempfile.TemporaryDirectory() as out:
        log_report = LogReport(
            filename="log.yaml", append=True, trigger=(1, "iteration"), postprocess=postprocess
        )
        _steps(_manager(Path(out), log_report), 2)
        text = Path(out, "log.yaml").read_text()
    assert len(text.splitlines()) == 2  # one line per record
    expected = json.loads(json.dumps(values))
    for loaded in yaml.safe_load(text):
        assert loaded.keys() == expected.keys()
        for key, value in expected.items():
            same_nan = isinstance(value, float) and math.isnan(value) and math.isnan(loaded[key])
            assert same_nan or (loaded[key] == value and type(loaded[key]) is type(value))


@pytest.mark.parametrize("filename", ["log.jsonl", "log.yaml"])
def test_appending_through_a_users_writer_sets_a_torn_last_record_aside(
    tmp_path: Path, filename: str
) -> None:
    path = tmp_path / filename
    log_report = LogReport(filename=filename, append=True, trigger=(1, "iteration"))
    _steps(_manager(tmp_path, log_report), 3)
    complete = path.read_bytes()
    path.write_bytes(complete + complete[:9])  # a process killed in the middle of a record
    log_report = LogReport(
        filename=filename, append=True, trigger=(1, "iteration"), writer=_CopyingWriter()
    )
    with pytest.warns(UserWarning, match=rf"{filename} .*\(line 4: torn: .*{filename}\.damaged-1"):
        _steps(_manager(tmp_path, log_report), 2)
    assert (tmp_path / f"{filename}.damaged-1").read_bytes() == complete[:9]
    data = path.read_bytes()
    assert data.startswith(complete)
    entries = (
        [json.loads(line) for line in data.splitlines()]
        if filename.endswith(".jsonl")
        else (yaml.safe_load(data))
    )
    assert [entry["iteration"] for entry in entries] == [1, 2, 3, 1, 2]
