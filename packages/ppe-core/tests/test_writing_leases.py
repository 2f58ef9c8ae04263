"""Leases: temporaries of writers killed on other hosts are removed once provably abandoned.

Another host is played by a temporary name whose host part is not this host's (crafted from
a real name); the file systems are real: the local disk, and S3 through pfio and s3fs on the
local server of the ``s3_server`` fixture (root conftest.py).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import re
import signal
import socket
import time
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

import pytest

from pytorch_pfn_extras import writing

TEMP_RE = re.compile(
    r"^\.(?P<base>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<rand>[0-9a-f]{8})$"
)
PERIOD = 0.25  # seconds between refreshes of the leases held in these tests
EXPIRY = 4 * PERIOD + 1.0  # hold_lease's documented expiry: 4 periods + 1 s of resolution
HOUR = 3600.0


def write_bytes(data: bytes, fileobj: IO[bytes]) -> None:
    fileobj.write(data)


def foreign(name: str) -> str:
    """``name`` (from ``temporary_name``) as another host would have made it."""
    match = TEMP_RE.match(name)
    assert match is not None, name
    other = "0badf00d" if match["host"] != "0badf00d" else "f00dbad0"
    return f".{match['base']}.tmp-{other}-{match['pid']}-{match['rand']}"


def _dead_pid() -> int:
    process = multiprocessing.get_context("fork").Process(target=os.getpid)
    process.start()
    process.join()
    assert process.pid is not None
    return process.pid


# ------------------------------------------------------------ the rule, on the local disk


def _lease(
    directory: Path, temporary: str, *, period: float = 15.0, age: float = 0.0, data: bytes = b""
) -> str:
    """A lease of ``temporary`` named as hold_lease names it, last refreshed ``age`` s ago."""
    name = f"{temporary}.lease-{round(period * 1000)}"
    (directory / name).write_bytes(data or b'{"period": 15.0, "host": "node-7", "pid": 42}\n')
    if age:
        stamp = time.time() - age
        os.utime(directory / name, (stamp, stamp))
    return name


def test_remove_stale_temporaries_removes_what_other_hosts_abandoned_and_nothing_else(
    tmp_path: Path,
) -> None:
    expired, fresh, unleased, long, torn, folder, orphan, uploading = (
        foreign(writing.temporary_name(base)) for base in "abcdefgh"
    )
    for file in (expired, fresh, unleased, long, torn):
        (tmp_path / file).write_bytes(b"partial")
    (tmp_path / folder / "sub").mkdir(parents=True)
    (tmp_path / folder / "sub" / "shard").write_bytes(b"partial")
    _lease(tmp_path, expired, age=HOUR)
    kept_leases = [
        _lease(tmp_path, fresh),
        _lease(tmp_path, long, period=HOUR, age=HOUR),  # 4 hours to live
        _lease(tmp_path, uploading),  # an upload in progress: no object yet
    ]
    _lease(tmp_path, torn, age=HOUR, data=b'{"peri')  # its writer was killed while refreshing
    _lease(tmp_path, folder, age=HOUR)
    _lease(tmp_path, orphan, age=HOUR)  # an upload killed before it completed
    # This host, a live process (our parent) but an expired lease: the pid was reused.
    reused = writing.temporary_name("i").replace(f"-{os.getpid()}-", f"-{os.getppid()}-")
    (tmp_path / reused).write_bytes(b"partial")
    _lease(tmp_path, reused, age=HOUR)
    (tmp_path / "snapshot_iter_1").write_bytes(b"complete")
    fs = writing.LocalFileSystem()
    out = str(tmp_path)
    gone = sorted(str(tmp_path / name) for name in (expired, torn, folder, reused))

    assert sorted(writing.stale_temporaries(fs, out)) == gone  # told, not removed
    assert sorted(writing.remove_stale_temporaries(fs, out)) == gone
    kept = {fresh, unleased, long, "snapshot_iter_1", *kept_leases}
    assert set(os.listdir(tmp_path)) == kept  # the probe of the clock is gone too
    assert writing.remove_stale_temporaries(fs, out) == []


class PlainFileSystem:
    """A user's file system with the required methods only: no ``modified``, no clock."""

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        return open(path, mode)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)


def test_without_a_clock_the_temporaries_of_other_hosts_are_kept(tmp_path: Path) -> None:
    remote = foreign(writing.temporary_name("a"))
    (tmp_path / remote).write_bytes(b"partial")
    remote_lease = _lease(tmp_path, remote, age=HOUR)
    dead = writing.temporary_name("b").replace(f"-{os.getpid()}-", f"-{_dead_pid()}-")
    (tmp_path / dead).write_bytes(b"partial")
    _lease(tmp_path, dead)
    assert writing.remove_stale_temporaries(PlainFileSystem(), str(tmp_path)) == [
        str(tmp_path / dead)  # this host's dead process: no clock needed, lease included
    ]
    assert sorted(os.listdir(tmp_path)) == [remote, remote_lease]


# ------------------------------------------------------------ hold_lease


def test_a_write_holds_a_lease_next_to_its_temporary_until_the_rename(tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def look(data: bytes, fileobj: IO[bytes]) -> None:
        lease = Path(fileobj.name + ".lease-15000")
        seen.append((lease.name, json.loads(lease.read_bytes())))
        fileobj.write(data)

    writing.SimpleWriter(savefun=look)("snapshot", str(tmp_path / "new"), b"data")
    ((lease, record),) = seen
    assert writing.is_temporary_file(lease) and writing.temporary_base(lease) is None
    assert record == {"period": 15.0, "host": socket.gethostname(), "pid": os.getpid()}
    assert os.listdir(tmp_path / "new") == ["snapshot"]


def test_hold_lease_refreshes_its_lease_and_removes_it_even_when_the_write_fails(
    tmp_path: Path,
) -> None:
    fs = writing.LocalFileSystem()
    temporary = str(tmp_path / "missing" / writing.temporary_name("shards"))
    with (
        pytest.raises(OSError, match="disk on fire"),
        writing.hold_lease(fs, temporary, period=0.01) as lease,
    ):
        assert lease == temporary + ".lease-10"
        first = os.stat(lease).st_mtime_ns
        deadline = time.monotonic() + 60
        while os.stat(lease).st_mtime_ns == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.stat(lease).st_mtime_ns != first, "the lease was never refreshed"
        raise OSError("disk on fire")
    assert os.listdir(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("temporary", "period", "message"),
    [
        ("out/snapshot_iter_1", 15.0, "temporary named by temporary_name.*'out/snapshot_iter_1'"),
        (
            ".a.tmp-0123abcd-42-deadbeef.lease-9",
            15.0,
            r"got '\.a\.tmp-0123abcd-42-deadbeef\.lease-9'",
        ),
        (
            ".a.tmp-0123abcd-42-deadbeef",
            0,
            "period must be a number of seconds of at least 0.001, got 0",
        ),
        (".a.tmp-0123abcd-42-deadbeef", float("nan"), "at least 0.001, got nan"),
        (".a.tmp-0123abcd-42-deadbeef", True, "at least 0.001, got True"),
    ],
)
def test_hold_lease_rejects_what_it_cannot_guard(
    tmp_path: Path, temporary: str, period: float, message: str
) -> None:
    with (
        pytest.raises(ValueError, match=message),
        writing.hold_lease(writing.LocalFileSystem(), temporary, period=period),
    ):
        pass
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------ a writer in another process


def _hold(fs: Any, held: list[str], ready: Connection) -> None:
    # Another host's writer: holds a lease on each of ``held`` and writes the first (the
    # second stands for an upload to S3 still in progress: a lease, no object yet).
    with (
        writing.hold_lease(fs, held[0], period=PERIOD),
        writing.hold_lease(fs, held[1], period=PERIOD),
    ):
        with fs.open(held[0], "wb") as f:
            f.write(b"partial snapshot")
        ready.send("holding")
        while True:
            time.sleep(HOUR)  # until SIGKILL


@pytest.fixture(params=["local", "pfio", "s3fs"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Any, str]:
    """A directory shared by "hosts": a user's ``fs`` object and the directory in it."""
    if request.param == "local":
        return None, str(tmp_path / "out")
    s3_server = request.getfixturevalue("s3_server")
    bucket = s3_server.new_bucket()
    if request.param == "pfio":
        return s3_server.pfio(f"s3://{bucket}/run"), "out"
    return s3_server.s3fs(), f"{bucket}/run/out"


@pytest.fixture
def killed_on_exit() -> Iterator[list[Any]]:
    processes: list[Any] = []
    yield processes
    for process in processes:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join()


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(PERIOD)


# Python 3.12 warns when a process with threads (the S3 server's, s3fs's loop) forks; the
# child uses none of them.
@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork\\(\\) may lead to deadlocks"
)
def test_a_killed_foreign_writers_temporary_is_removed_once_its_lease_expired_never_before(
    shared: tuple[Any, str], killed_on_exit: list[Any]
) -> None:
    user_fs, out = shared
    writer = writing.SimpleWriter(savefun=write_bytes, fs=user_fs)
    fs = writer.fs
    fs.makedirs(out, exist_ok=True)
    held = [f"{out}/{foreign(writing.temporary_name(base))}" for base in ("snapshot_8", "log")]
    unleased = f"{out}/{foreign(writing.temporary_name('snapshot_4'))}"  # an older version's
    with fs.open(unleased, "wb") as f:
        f.write(b"partial")
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_hold, args=(fs, held, send), daemon=True)
    child.start()
    killed_on_exit.append(child)
    assert receive.poll(120) and receive.recv() == "holding"
    lease = f".lease-{round(PERIOD * 1000)}"
    leftovers = {os.path.basename(p) for p in (held[0], held[0] + lease, held[1] + lease)}

    # Alive and refreshing: kept, by a writer's scan and by every cleanup, past the expiry.
    writer("snapshot_9", out, b"9")
    end = time.monotonic() + EXPIRY + 2 * PERIOD
    while time.monotonic() < end:
        assert writing.remove_stale_temporaries(fs, out) == []
        time.sleep(PERIOD / 2)
    names = set(fs.listdir(out))
    assert names == leftovers | {os.path.basename(unleased), "snapshot_9"}

    # Killed: the writer, which kept them at its first scan, removes them at a later write.
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]  # started: it has one
    child.join()

    def cleaned() -> bool:
        writer("snapshot_9", out, b"9")
        return not set(fs.listdir(out)) & leftovers

    _until(cleaned, f"the writer removes {sorted(leftovers)}")
    assert sorted(fs.listdir(out)) == sorted([os.path.basename(unleased), "snapshot_9"])
    with fs.open(f"{out}/snapshot_9", "rb") as f:
        assert f.read() == b"9"


# ------------------------------------------------------------ post-save hooks


def test_a_removed_post_save_hook_is_no_longer_called_nor_kept(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    class Retention:  # what a snapshot extension registers: a bound method of its own
        def __init__(self, name: str) -> None:
            self.name = name

        def after_save(self, path: str) -> None:
            calls.append((self.name, os.path.basename(path)))

    writer = writing.SimpleWriter(savefun=write_bytes)  # reused by two runs
    first, second = Retention("first run"), Retention("second run")
    writer.add_post_save_hook(first.after_save)
    writer("a", str(tmp_path), b"a")
    writer.remove_post_save_hook(first.after_save)  # an equal bound method is enough
    writer.add_post_save_hook(second.after_save)
    writer.add_post_save_hook(second.after_save)
    writer.remove_post_save_hook(second.after_save)  # added twice, removed once
    writer("b", str(tmp_path), b"b")
    assert calls == [("first run", "a"), ("second run", "b")]
    with pytest.raises(
        ValueError,
        match=r"SimpleWriter: the post-save hook <bound method .*after_save of .* is not registered",
    ):
        writer.remove_post_save_hook(first.after_save)
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # the writer no longer keeps the first run's extension alive
