"""LogReport: entries, formats, files written through the writer, resume."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport
from pytorch_pfn_extras.writing import ThreadWriter


def _value(i: int) -> float:
    return float(i * i % 7)


def _run(
    tmp_path: Any,
    log_report: LogReport,
    iterations: int,
    *,
    iters_per_epoch: int = 3,
    state: dict[str, Any] | None = None,
) -> tuple[ExtensionsManager, LogReport]:
    manager = ExtensionsManager({}, {}, 100, iters_per_epoch=iters_per_epoch, out_dir=tmp_path)
    manager.extend(log_report)
    if state is not None:
        manager.load_state_dict(state)
    for _ in range(iterations):
        with manager.run_iteration():
            i = manager.iteration + 1
            reporting.report({"loss": _value(i), "acc": torch.tensor(i / 10), "note": "text"})
    return manager, log_report


def _means(start: int, stop: int) -> tuple[float, float]:
    its = range(start, stop + 1)
    return sum(_value(i) for i in its) / len(its), sum(i / 10 for i in its) / len(its)


def test_entries_hold_interval_means_epoch_iteration_elapsed_time(tmp_path: Any) -> None:
    _, log_report = _run(tmp_path, LogReport(), 7)
    log = log_report.log
    assert [(e["epoch"], e["iteration"]) for e in log] == [(1, 3), (2, 6)]
    for entry, (start, stop) in zip(log, [(1, 3), (4, 6)]):
        loss, acc = _means(start, stop)
        assert entry["loss"] == pytest.approx(loss)
        assert entry["acc"] == pytest.approx(acc)
        assert isinstance(entry["acc"], float)
        assert "note" not in entry
    assert 0 < log[0]["elapsed_time"] <= log[1]["elapsed_time"]
    assert list(log[0]) == ["loss", "acc", "epoch", "iteration", "elapsed_time"]
    assert json.loads((tmp_path / "log").read_text()) == log
    assert [p.name for p in tmp_path.iterdir()] == ["log"]


def test_keys_trigger_and_postprocess(tmp_path: Any) -> None:
    def postprocess(entry: dict[str, Any]) -> None:
        entry["loss_x2"] = entry["loss"] * 2

    log_report = LogReport(keys=["loss"], trigger=(2, "iteration"), postprocess=postprocess)
    _, log_report = _run(tmp_path, log_report, 4)
    assert [set(e) for e in log_report.log] == [
        {"loss", "loss_x2", "epoch", "iteration", "elapsed_time"}
    ] * 2
    assert log_report.log[1]["loss_x2"] == pytest.approx(2 * _means(3, 4)[0])


@pytest.mark.parametrize(
    ("filename", "fmt", "load"),
    [
        ("log.jsonl", None, lambda text: [json.loads(line) for line in text.splitlines()]),
        ("log.yaml", None, yaml.safe_load),
        ("log.txt", "yaml", yaml.safe_load),
        ("out.json", None, json.loads),
        ("log.txt", "json-lines", lambda text: [json.loads(line) for line in text.splitlines()]),
    ],
)
@pytest.mark.parametrize("append", [False, True])
def test_formats_are_inferred_or_given_and_append_grows_the_file(
    tmp_path: Any, filename: str, fmt: str | None, load: Any, append: bool
) -> None:
    if append and fmt is None and filename.endswith(".json"):
        with pytest.raises(ValueError, match="append=True needs the 'json-lines' or 'yaml' format"):
            LogReport(filename=filename, append=append)
        return
    _, log_report = _run(tmp_path, LogReport(filename=filename, format=fmt, append=append), 9)
    written = load((tmp_path / filename).read_text())
    assert written == log_report.log
    assert len(written) == 3


def test_filename_is_formatted_with_the_entry(tmp_path: Any) -> None:
    _run(tmp_path, LogReport(filename="log_{iteration}.json"), 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log_3.json", "log_6.json"]
    assert len(json.loads((tmp_path / "log_6.json").read_text())) == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"format": "csv"}, ValueError, "format must be one of .* got 'csv'"),
        ({"filename": ""}, ValueError, "non-empty string, got ''"),
        ({"log_dir": "x"}, TypeError, r"unexpected keyword arguments \['log_dir'\]"),
        ({"trigger": (1, "epochs")}, ValueError, "'epochs'"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        LogReport(**kwargs)


def test_log_name_keyword_is_accepted(tmp_path: Any) -> None:
    _run(tmp_path, LogReport(log_name="history.jsonl"), 3)
    assert (tmp_path / "history.jsonl").exists()


def test_to_dataframe(tmp_path: Any) -> None:
    _, log_report = _run(tmp_path, LogReport(), 6)
    frame = log_report.to_dataframe()
    assert list(frame["iteration"]) == [3, 6]
    assert frame["loss"].tolist() == pytest.approx([_means(1, 3)[0], _means(4, 6)[0]])


def test_own_writer_is_used_and_finalized(tmp_path: Any) -> None:
    writer = ThreadWriter()
    manager, _ = _run(tmp_path, LogReport(writer=writer, filename="log.jsonl"), 5)
    manager.finalize()
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [3]


def test_numpy_and_tensor_values_from_postprocess_are_written_as_numbers(tmp_path: Any) -> None:
    def postprocess(entry: dict[str, Any]) -> None:
        entry["np"] = np.float32(0.5)
        entry["t"] = torch.tensor(2)
        entry["vec"] = np.arange(2)

    _run(tmp_path, LogReport(postprocess=postprocess), 3)
    (entry,) = json.loads((tmp_path / "log").read_text())
    assert (entry["np"], entry["t"], entry["vec"]) == (0.5, 2, [0, 1])


@pytest.mark.parametrize("resume_at", [1, 3, 4, 8])
@pytest.mark.parametrize("filename", ["log", "log.jsonl"])
def test_resume_reproduces_the_log_of_the_uninterrupted_run(
    tmp_path: Any, resume_at: int, filename: str
) -> None:
    append = filename.endswith(".jsonl")
    straight, _ = _run(tmp_path / "a", LogReport(filename=filename, append=append), 10)
    first, _ = _run(tmp_path / "b", LogReport(filename=filename, append=append), resume_at)
    state = first.state_dict()
    # The interrupted process went on and wrote entries after the snapshot was taken.
    _run(tmp_path / "b", LogReport(filename=filename, append=append), 9, state=state)
    resumed, log_report = _run(
        tmp_path / "b", LogReport(filename=filename, append=append), 10 - resume_at, state=state
    )

    def strip(text: str) -> list[dict[str, Any]]:
        entries = (
            json.loads(text) if not append else [json.loads(line) for line in text.splitlines()]
        )
        for entry in entries:
            del entry["elapsed_time"]
        return entries

    assert strip((tmp_path / "b" / filename).read_text()) == strip(
        (tmp_path / "a" / filename).read_text()
    )
    state_a = straight.state_dict()["extensions"]["LogReport"]["extension"]
    state_b = resumed.state_dict()["extensions"]["LogReport"]["extension"]
    assert state_a["summary"] == state_b["summary"]
    assert state_a["n_written"] == state_b["n_written"]
    if not append:
        assert [
            {k: v for k, v in e.items() if k != "elapsed_time"} for e in log_report.log
        ] == strip((tmp_path / "a" / filename).read_text())
