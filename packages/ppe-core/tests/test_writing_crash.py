"""Crash safety of SimpleWriter with real processes killed at known points of a write.

A zygote subprocess (``writing_crash_worker.py``) imports torch once and forks a
writer child per run. The child stops at a point of its write that the test chooses
(after each chunk of the savefun's data, or once the writer has returned), says so,
and the test SIGKILLs it there; or the kernel kills it in the middle of an append's
``write`` (a file size limit). The test then checks that a replaced destination is
the previous complete file, next to the partial temporary of exactly the chunks
written, or the new one after the writer returned; that the next write succeeds
despite leftovers and removes them; and that an appended file keeps every completed
append, and the torn prefix of the interrupted one, before the next append.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from pytorch_pfn_extras.writing import is_temporary_file

HERE = Path(__file__).resolve().parent
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
        self, mode: str, out_dir: Path, start: int, count: int, stop: str = ""
    ) -> tuple[list[str], int]:
        """Run a writer child; return its lines and exit status.

        With a ``stop`` where the child waits (``chunk:K``, ``returned``), the child is
        SIGKILLed once it says it has got there.
        """
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {mode} {out_dir} {start} {count} {stop}\n")
        self.proc.stdin.flush()
        lines: list[str] = []
        pid = None
        killed = False
        # The child's lines and the zygote's "pid" line come in either order.
        while not (line := self._line()).startswith("exit "):
            if line.startswith("pid "):
                pid = int(line.split()[1])
            else:
                lines.append(line)
            if not killed and pid is not None and lines and lines[-1].startswith("stopped "):
                # The child waits until killed and the zygote reaps it only then: the pid
                # still names it.
                os.kill(pid, signal.SIGKILL)
                killed = True
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
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        pytest.skip("needs os.fork and Linux's prctl")
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


def _temporaries(out_dir: Path, destination: str) -> list[Path]:
    """The files beside the destination, all hidden temporaries of it (or their leases)."""
    names = os.listdir(out_dir)
    assert destination in names
    temporaries = [name for name in names if name != destination]
    assert all(is_temporary_file(name) for name in temporaries), names
    assert all(name.startswith(f".{destination}.tmp-") for name in temporaries), names
    return [out_dir / name for name in temporaries]


def test_killed_simple_writer_leaves_old_or_new_complete_snapshot(
    zygote: Zygote, worker: ModuleType, tmp_path: Path
) -> None:
    payloads = [(t, worker.tensor_sha(t)) for t in map(worker.payload_tensor, (0, 1))]
    out_dir = tmp_path / "out"
    path = out_dir / worker.REPLACE_FILE

    def check(path: Path) -> int:
        loaded = torch.load(path)
        version = loaded["version"]
        assert loaded["sha"] == payloads[version % 2][1]
        assert worker.tensor_sha(loaded["data"]) == loaded["sha"]
        return int(version)

    lines, status = zygote.run("replace", out_dir, 0, 3)
    assert (lines, status) == (["begin 0", "done 0", "begin 1", "done 1", "begin 2", "done 2"], 0)
    version = check(path)
    assert version == 2
    # Killed before the first chunk, after each one, after the last one (before the writer's
    # fsync and rename), and once the writer has returned.
    stops = [f"chunk:{k}" for k in range(worker.CHUNKS + 1)] + ["returned"]
    for stop in stops:
        new = version + 1
        lines, status = zygote.run("replace", out_dir, new, 1, stop)
        assert (lines, status) == ([f"begin {new}", f"stopped {new} {stop}"], -signal.SIGKILL)
        leftovers = _temporaries(out_dir, worker.REPLACE_FILE)
        if stop == "returned":
            assert check(path) == new
            assert leftovers == []
        else:
            assert check(path) == version, stop  # the previous file, whole
            # ...and the interrupted write's temporary, holding exactly the chunks written.
            data = worker.serialized(worker.replace_target(new, payloads[new % 2]))
            written = int(stop.split(":")[1]) * worker.chunk_bytes(len(data))
            contents = [leftover.read_bytes() for leftover in leftovers]
            assert data[:written] in contents, (stop, [len(c) for c in contents])
        version = check(path)
        # The next write succeeds whatever the kill left, and removes the leftovers.
        lines, status = zygote.run("replace", out_dir, version + 1, 1)
        assert (lines, status) == ([f"begin {version + 1}", f"done {version + 1}"], 0)
        version = check(path)
        assert os.listdir(out_dir) == [worker.REPLACE_FILE]


def test_killed_appending_simple_writer_keeps_every_completed_append(
    zygote: Zygote, worker: ModuleType, tmp_path: Path
) -> None:
    """An append is one write at the end of the file, so after a kill the file is exactly:
    the earlier bytes, untouched; every append that returned; and a prefix (possibly empty
    or whole) of the append in progress. The writer does not repair that torn record: the
    next append goes after it and leaves it in place."""
    out_dir = tmp_path / "out"
    path = out_dir / worker.APPEND_FILE
    lines, status = zygote.run("append", out_dir, 0, 3)
    assert status == 0
    expected = b"".join(worker.record(v) for v in range(3))
    assert path.read_bytes() == expected
    version = 10  # the records of versions 10 to 99 have the same size
    size = len(worker.record(version))
    # (stop, the bytes of the interrupted append left in the file, how the child died):
    # killed while the savefun fills its memory buffer (nothing written yet); in the middle
    # of the append's write, the kernel cutting it after 0, 1, half, all but one byte; and
    # once the writer has returned.
    cases = [
        (f"chunk:{worker.CHUNKS // 2}", 0, -signal.SIGKILL),
        *((f"byte:{n}", n, -signal.SIGXFSZ) for n in (0, 1, size // 2, size - 1)),
        ("returned", size, -signal.SIGKILL),
    ]
    for stop, kept, death in cases:
        lines, status = zygote.run("append", out_dir, version, 1, stop)
        said = [f"begin {version}"] + (
            [f"stopped {version} {stop}"] if death == -signal.SIGKILL else []
        )
        assert (lines, status) == (said, death), stop
        in_progress = worker.record(version)
        assert len(in_progress) == size
        data = path.read_bytes()
        assert data == expected + in_progress[:kept], (stop, len(data) - len(expected))
        assert os.listdir(out_dir) == [worker.APPEND_FILE]  # no temporary, ever
        expected = data
        version += 1
        lines, status = zygote.run("append", out_dir, version, 1)
        assert (lines, status) == ([f"begin {version}", f"done {version}"], 0)
        expected += worker.record(version)
        assert path.read_bytes() == expected  # after the torn record, which stays
        version += 1
