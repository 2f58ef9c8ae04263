"""LogReport at scale: each write costs one entry, survives SIGKILL, and resumes exactly."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport

KILLS = 6
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MODES = [
    ("log.json", False),
    ("log.jsonl", False),
    ("log.yaml", False),
    ("log.jsonl", True),
    ("log.yaml", True),
]


def _strict_load(path: Path) -> list[Any]:
    text = path.read_text()
    if path.suffix == ".json":
        return list(json.loads(text))
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines()]
    return list(yaml.load(text, Loader=_YAML_LOADER) or [])


def _manager(out: Path, log_report: LogReport) -> ExtensionsManager:
    manager = ExtensionsManager({}, {}, 10**6, iters_per_epoch=7, out_dir=str(out))
    manager.extend(log_report)
    return manager


def _step(manager: ExtensionsManager, keys: int = 2) -> None:
    with manager.run_iteration():
        i = manager.iteration + 1
        reporting.report({f"value{j}": float(i * (j + 1) % 11) for j in range(keys)})


def _without_times(entries: list[Any]) -> list[Any]:
    return [{k: v for k, v in e.items() if k != "elapsed_time"} for e in entries]


@pytest.mark.parametrize(("filename", "append"), MODES)
def test_file_is_valid_and_complete_after_every_write(
    tmp_path: Path, filename: str, append: bool
) -> None:
    log_report = LogReport(filename=filename, append=append, trigger=(1, "iteration"))
    manager = _manager(tmp_path, log_report)
    path = tmp_path / filename
    for _ in range(40):
        _step(manager)
        assert _strict_load(path) == log_report.log
        assert LogReport.read(path) == log_report.log
    assert os.listdir(tmp_path) == [filename]


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io (Linux)")
@pytest.mark.parametrize(("filename", "append"), MODES)
def test_a_write_costs_one_entry_whatever_the_length_of_the_log(
    tmp_path: Path, filename: str, append: bool
) -> None:
    def bytes_written() -> int:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))

    log_report = LogReport(filename=filename, append=append, trigger=(1, "iteration"))
    manager = _manager(tmp_path, log_report)
    path = tmp_path / filename
    _step(manager)
    inode = path.stat().st_ino
    costs = []
    for _ in range(600):
        size, before = path.stat().st_size, bytes_written()
        _step(manager)
        costs.append((bytes_written() - before, path.stat().st_size - size))
    # The bytes written are about those the file grew by, the same at entry 10 and 600.
    for written, grown in costs[5:]:
        assert grown - 16 <= written <= grown + 16, (written, grown)
    assert costs[-1][0] <= costs[8][0] + 16
    assert path.stat().st_ino == inode  # never replaced by a rewritten copy
    # Earlier content is never rewritten: a mark made in place survives later writes.
    marked = path.read_bytes().replace(b"value0", b"VALUE0", 1)
    path.write_bytes(marked)
    for _ in range(3):
        _step(manager)
    assert path.read_bytes().startswith(marked[:-2])  # "\n]" of json is overwritten


# The children are forked by multiprocessing's fork server, a single-threaded process that has
# imported what they use once: a plain fork of a pytest-xdist worker can inherit a lock (an
# import's, a stream's) held by another thread and hang before its first write, and a fresh
# interpreter per child would import torch each time (2 s of CPU, for 30 children). A child
# tells each completed iteration through its end of a pipe.
_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(
    ["pytorch_pfn_extras.reporting", "pytorch_pfn_extras.training.extensions"]
)
_CHILD = """
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport

log_report = LogReport(filename=filename, append=append, trigger=(1, "iteration"))
manager = ExtensionsManager({}, {}, 10**6, iters_per_epoch=7, out_dir=out)
manager.extend(log_report)
while True:
    with manager.run_iteration():  # entries of several KiB: writes span pages and can tear
        i = manager.iteration + 1
        reporting.report({f"value{j}": float(i * (j + 1) % 11) for j in range(150)})
    done.send(manager.iteration)
"""


def _start_child(out: Path, filename: str, append: bool) -> tuple[Any, Connection]:
    """A child running LogReport at every iteration until killed, and the pipe end that
    receives each iteration it completed."""
    receiver, sender = _FORKSERVER.Pipe(duplex=False)
    names = {"out": str(out), "filename": filename, "append": append, "done": sender}
    child = _FORKSERVER.Process(target=exec, args=(_CHILD, names), daemon=True)
    child.start()
    sender.close()  # the child holds the only writing end: its death ends the pipe
    return child, receiver


@pytest.mark.slow
@pytest.mark.parametrize(("filename", "append"), MODES)
def test_sigkill_at_random_points_keeps_every_completed_entry(
    tmp_path: Path, filename: str, append: bool
) -> None:
    rng = random.Random(filename + str(append))
    path = tmp_path / filename
    before: list[Any] = []
    torn = 0
    for _ in range(KILLS):
        child, receiver = _start_child(tmp_path, filename, append)
        assert receiver.poll(120), "the child wrote no entry within 120 s"
        done = [receiver.recv()]  # the first entry is written: kill it at a random point
        time.sleep(rng.uniform(0.02, 0.3))
        child.kill()
        child.join()
        assert child.exitcode == -signal.SIGKILL
        with contextlib.suppress(EOFError):
            while True:
                done.append(receiver.recv())
        receiver.close()
        last = done[-1]
        if not path.exists():
            continue
        try:
            _strict_load(path)
        except (ValueError, yaml.YAMLError):  # a torn last entry: LogReport.read drops it
            torn += 1
        entries = LogReport.read(path)
        # A fresh run replaces the log; append mode keeps every earlier complete entry.
        kept = before if append else []
        assert entries[: len(kept)] == kept
        iterations = [entry["iteration"] for entry in entries[len(kept) :]]
        assert iterations in (list(range(1, last + 1)), list(range(1, last + 2)))
        before = entries
    print(f"{filename} append={append}: {torn} torn files of {KILLS} kills")


def _states_through(
    out: Path, filename: str, append: bool, stop: int, *, snapshot_at: int | None = None
) -> tuple[LogReport, dict[str, Any] | None]:
    log_report = LogReport(filename=filename, append=append, trigger=(2, "iteration"))
    manager = _manager(out, log_report)
    state = None
    for _ in range(stop):
        _step(manager)
        if manager.iteration == snapshot_at:
            state = manager.state_dict()
    return log_report, state


@pytest.mark.parametrize("resume_at", [1, 6, 13])
@pytest.mark.parametrize("torn", [False, True])
@pytest.mark.parametrize(("filename", "append"), MODES)
def test_resume_after_entries_past_the_snapshot_equals_an_uninterrupted_run(
    tmp_path: Path, filename: str, append: bool, torn: bool, resume_at: int
) -> None:
    _states_through(tmp_path / "a", filename, append, 30)
    # The killed run went on past its snapshot, and may have died in the middle of a write.
    _, state = _states_through(tmp_path / "b", filename, append, 21, snapshot_at=resume_at)
    assert state is not None
    path = tmp_path / "b" / filename
    expect_warning: Any = contextlib.nullcontext()
    if torn:
        data = path.read_bytes()
        path.write_bytes(data[:-7] if filename.endswith(".json") else data + data[:9])
        expect_warning = pytest.warns(UserWarning, match=r"line \d+: torn: ")
    log_report = LogReport(filename=filename, append=append, trigger=(2, "iteration"))
    manager = _manager(tmp_path / "b", log_report)
    manager.load_state_dict(state)
    with expect_warning:
        for _ in range(30 - resume_at):
            _step(manager)
    expected = _without_times(_strict_load(tmp_path / "a" / filename))
    assert [e["iteration"] for e in expected] == list(range(2, 31, 2))
    assert _without_times(_strict_load(path)) == expected
    if not append:
        assert _without_times(log_report.log) == expected
