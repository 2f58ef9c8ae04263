"""Crash safety of SimpleWriter with real processes SIGKILLed at random moments.

A zygote subprocess (``writing_crash_worker.py``) imports torch once and forks a
writer child per run; the test kills the child after a random delay, then checks
that a replaced destination is the previous or the new complete file, that the
next write succeeds despite leftovers, and that the leftovers get cleaned up; and
that an appended file keeps every completed append, with at most a torn last record.
"""

from __future__ import annotations

import importlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from pytorch_pfn_extras.writing import is_temporary_file

HERE = Path(__file__).resolve().parent
KILLS = 36
pytestmark = pytest.mark.slow


class Zygote:
    """Drives ``writing_crash_worker.py`` (see its docstring for the protocol)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "writing_crash_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        # A hung run must fail the test, not block it forever.
        self._watchdog = threading.Timer(240.0, self.proc.kill)
        self._watchdog.daemon = True
        self._watchdog.start()
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the crash worker exited unexpectedly (see its stderr)")
        return line.strip()

    def run(
        self, mode: str, out_dir: Path, start: int, count: int, kill_after: float | None = None
    ) -> tuple[list[str], int]:
        """Run a writer child; return its ``begin``/``done`` lines and exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {mode} {out_dir} {start} {count}\n")
        self.proc.stdin.flush()
        lines = []  # the child may start writing before the zygote reports its pid
        while not (line := self._line()).startswith("pid "):
            lines.append(line)
        pid = line.split()[1]
        if kill_after is not None:
            # A pidfd names this very process, even if its PID were reused.
            pidfd = os.pidfd_open(int(pid))
            try:
                time.sleep(kill_after)
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            finally:
                os.close(pidfd)
        while not (line := self._line()).startswith("exit "):
            lines.append(line)
        assert not any(line.startswith("error") for line in lines), lines
        return lines, int(line.split()[2])

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self._watchdog.cancel()


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    if not hasattr(os, "pidfd_open") or not hasattr(os, "fork"):
        pytest.skip("needs os.fork and os.pidfd_open (Linux)")
    zygote = Zygote()
    yield zygote
    zygote.close()


@pytest.fixture(scope="module")
def worker() -> Iterator[ModuleType]:
    sys.path.insert(0, str(HERE))
    try:
        yield importlib.import_module("writing_crash_worker")
    finally:
        sys.path.remove(str(HERE))


def _versions(lines: list[str], previous: int) -> set[int]:
    """Versions the destination may hold after a killed run."""
    begun = [int(line.split()[1]) for line in lines if line.startswith("begin")]
    done = [int(line.split()[1]) for line in lines if line.startswith("done")]
    allowed = {max(done) if done else previous}
    if begun and begun[-1] not in done:
        allowed.add(begun[-1])  # killed between the rename and "done"
    return allowed


def _check_listing(out_dir: Path, destination: str) -> int:
    """Only the destination and hidden temporaries; return the temporaries' count."""
    names = os.listdir(out_dir)
    assert destination in names
    temporaries = [name for name in names if name != destination]
    assert all(is_temporary_file(name) for name in temporaries), names
    assert all(name.startswith(f".{destination}.tmp-") for name in temporaries), names
    return len(temporaries)


def _kill_loop(
    zygote: Zygote, mode: str, out_dir: Path, destination: str, check: object, seed: int
) -> None:
    assert callable(check)
    started = time.perf_counter()
    lines, status = zygote.run(mode, out_dir, 0, 3)
    per_write = (time.perf_counter() - started) / 3
    assert status == 0
    assert lines == ["begin 0", "done 0", "begin 1", "done 1", "begin 2", "done 2"]
    version = check(out_dir / destination)
    assert version == 2
    rng = random.Random(seed)
    mid_write = leftovers = 0
    for _ in range(KILLS):
        lines, status = zygote.run(
            mode, out_dir, version + 1, -1, kill_after=rng.uniform(0.0, 2.5 * per_write)
        )
        assert status == -signal.SIGKILL
        mid_write += bool(lines) and lines[-1].startswith("begin")
        found = check(out_dir / destination)
        assert found in _versions(lines, version), (found, lines)
        leftovers += _check_listing(out_dir, destination)
        version = found
        # The next write succeeds whatever the kill left, and removes the leftovers.
        lines, status = zygote.run(mode, out_dir, version + 1, 1)
        assert (lines, status) == ([f"begin {version + 1}", f"done {version + 1}"], 0)
        version = check(out_dir / destination)
        assert version == int(lines[0].split()[1])
        assert os.listdir(out_dir) == [destination]
    # The kills really landed during writes, and some left partial temporaries.
    stats = f"{mid_write=} {leftovers=} {per_write=:.3f}s"
    assert mid_write >= KILLS // 3, stats
    assert leftovers > 0, stats


def test_killed_simple_writer_leaves_old_or_new_complete_snapshot(
    zygote: Zygote, worker: ModuleType, tmp_path: Path
) -> None:
    expected_sha = [worker.tensor_sha(worker.payload_tensor(v)) for v in (0, 1)]

    def check(path: Path) -> int:
        loaded = torch.load(path)
        version = loaded["version"]
        assert loaded["sha"] == expected_sha[version % 2]
        assert worker.tensor_sha(loaded["data"]) == loaded["sha"]
        return int(version)

    _kill_loop(zygote, "replace", tmp_path / "out", worker.REPLACE_FILE, check, seed=0)


def test_killed_appending_simple_writer_keeps_every_completed_append(
    zygote: Zygote, worker: ModuleType, tmp_path: Path
) -> None:
    """An append is one write at the end of the file, so after a SIGKILL the file is
    exactly: the earlier bytes, untouched; every append that returned; and a prefix
    (possibly empty or whole) of the append in progress. The writer does not repair
    that torn record: the next append goes after it and leaves it in place."""
    out_dir = tmp_path / "out"
    path = out_dir / worker.APPEND_FILE
    started = time.perf_counter()
    lines, status = zygote.run("append", out_dir, 0, 3)
    per_write = (time.perf_counter() - started) / 3
    assert status == 0
    expected = b"".join(worker.record(v) for v in range(3))
    assert path.read_bytes() == expected
    rng = random.Random(1)
    version = 3
    mid_write = torn = 0
    for _ in range(KILLS):
        lines, status = zygote.run(
            "append", out_dir, version, -1, kill_after=rng.uniform(0.0, 2.5 * per_write)
        )
        assert status == -signal.SIGKILL
        begun = [int(line.split()[1]) for line in lines if line.startswith("begin")]
        done = [int(line.split()[1]) for line in lines if line.startswith("done")]
        data = path.read_bytes()
        completed = expected + b"".join(worker.record(v) for v in done)
        assert data.startswith(completed), "an earlier byte changed or a completed append is lost"
        tail = data[len(completed) :]
        if begun and begun[-1] not in done:
            mid_write += 1
            in_progress = worker.record(begun[-1])
            assert in_progress.startswith(tail)
            torn += 0 < len(tail) < len(in_progress)
        else:
            assert tail == b""
        assert os.listdir(out_dir) == [worker.APPEND_FILE]  # no temporary, ever
        expected = data
        version = begun[-1] + 1 if begun else version
        lines, status = zygote.run("append", out_dir, version, 1)
        assert (lines, status) == ([f"begin {version}", f"done {version}"], 0)
        expected += worker.record(version)
        assert path.read_bytes() == expected  # after the torn record, which stays
        version += 1
    print(f"append: {mid_write} kills during an append, {torn} torn records, {per_write=:.3f}s")
    assert mid_write > 0
