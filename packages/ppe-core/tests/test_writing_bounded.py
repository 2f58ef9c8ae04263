"""Asynchronous writers hold a bounded number of writes, however slow the disk.

The savefun of these tests holds each write until the test releases it
(``writing_helpers.GatedSave``), so what the writer does meanwhile is an invariant,
not a race: while write ``i`` is held, no later write can finish.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import signal
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.writing import (
    ProcessQueueWriter,
    ProcessWriter,
    QueueWriter,
    ThreadQueueWriter,
    ThreadWriter,
    Writer,
)

HERE = Path(__file__).resolve().parent
TIMEOUT = 120.0  # only ever reached when the writer hangs


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("writing_helpers")


class CopyCounter:
    """Counts the copies asynchronous writers take of a target holding it."""

    copies = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> CopyCounter:
        CopyCounter.copies += 1
        return CopyCounter()


def _events(process: bool, count: int) -> list[Any]:
    # Process writers fork: their savefun sees multiprocessing events.
    make = multiprocessing.get_context("fork").Event if process else threading.Event
    return [make() for _ in range(count)]


class Producer:
    """Calls ``writer`` for writes ``0..count-1`` in a thread, marking each return."""

    def __init__(self, writer: Writer, out_dir: Path, count: int, *, counted: bool) -> None:
        self.returned = [threading.Event() for _ in range(count)]
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(writer, out_dir, count, counted))
        self._thread.start()

    def _run(self, writer: Writer, out_dir: Path, count: int, counted: bool) -> None:
        # A CopyCounter stays in the calling process (it is not importable by a consumer).
        extra = {"c": CopyCounter()} if counted else {}
        try:
            for i in range(count):
                writer(f"snapshot_{i}", str(out_dir), {"i": i, "w": torch.full((4,), i), **extra})
                self.returned[i].set()
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error


BOUNDED = [
    (ThreadQueueWriter, {"max_pending": 2}, 2),
    (ThreadQueueWriter, {"max_pending": 1}, 1),
    (ThreadQueueWriter, {"max_pending": 3}, 3),
    (ThreadQueueWriter, {}, 2),  # the default bound
    (ProcessQueueWriter, {"max_pending": 2, "mp_context": "fork"}, 2),
    (ProcessQueueWriter, {"max_pending": 1, "mp_context": "fork"}, 1),
    (ThreadWriter, {}, 1),  # one write in flight: the next call waits for it
    (ProcessWriter, {"mp_context": "fork"}, 1),
]


@pytest.mark.parametrize(
    ("writer_class", "options", "bound"),
    BOUNDED,
    ids=[f"{cls.__name__}-{bound}-{'/'.join(options)}" for cls, options, bound in BOUNDED],
)
def test_a_call_blocks_while_the_bound_of_pending_writes_is_reached(
    tmp_path: Path,
    helpers: ModuleType,
    writer_class: type[Writer],
    options: dict[str, Any],
    bound: int,
) -> None:
    count = 6
    process = writer_class in (ProcessQueueWriter, ProcessWriter)
    entered, release = _events(process, count), _events(process, count)
    writer = writer_class(helpers.GatedSave(entered, release), **options)  # type: ignore[call-arg]
    CopyCounter.copies = 0
    producer = Producer(writer, tmp_path, count, counted=not process)
    for i in range(count):
        assert entered[i].wait(TIMEOUT), f"write {i} never started"
        # Write i is held: writes i..i+bound-1 are pending, so their calls returned (or
        # return now), and the next call waits for a slot without copying its target.
        last = min(i + bound, count) - 1
        assert producer.returned[last].wait(TIMEOUT), f"call {last} did not return"
        if last + 1 < count:
            assert not producer.returned[last + 1].is_set()
        if not process:
            assert CopyCounter.copies == last + 1
        release[i].set()
    producer.join()
    writer.finalize()
    for i in range(count):
        assert torch.load(tmp_path / f"snapshot_{i}", weights_only=False)["i"] == i


@pytest.mark.parametrize("writer_class", [ThreadQueueWriter, ProcessQueueWriter])
def test_max_pending_is_a_constructor_keyword_with_a_readable_value(
    writer_class: type[QueueWriter],
) -> None:
    assert writer_class().max_pending == 2
    assert writer_class(torch.save, None, "", None, max_pending=16).max_pending == 16


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, "max_pending must be >= 1 (writes held at once), got 0"),
        (-3, ValueError, "got -3"),
        (2.5, TypeError, "max_pending must be an int >= 1, got 2.5"),
        (True, TypeError, "got True"),
        (None, TypeError, "got None"),
    ],
)
def test_bad_max_pending_is_rejected(value: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match.replace("(", r"\(").replace(")", r"\)")):
        ThreadQueueWriter(max_pending=value)


@pytest.mark.parametrize("writer_class", [ThreadQueueWriter, ProcessQueueWriter])
def test_failure_of_a_held_write_is_raised_by_the_call_blocked_behind_it(
    tmp_path: Path, helpers: ModuleType, writer_class: type[QueueWriter]
) -> None:
    process = writer_class is ProcessQueueWriter
    entered, release = _events(process, 2), _events(process, 2)
    options = {"mp_context": "fork"} if process else {}
    gate = helpers.GatedSave(entered, release)

    def failing_after_gate(target: Any, fileobj: Any) -> None:
        gate(target, fileobj)
        raise helpers.SaveFailedError(f"write {target['i']} failed")

    writer = writer_class(failing_after_gate, max_pending=1, **options)
    writer("first", str(tmp_path), {"i": 0})
    assert entered[0].wait(TIMEOUT)
    outcome: list[BaseException | None] = []

    def second_call() -> None:
        try:
            writer("second", str(tmp_path), {"i": 1})
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=second_call)
    caller.start()
    release[0].set()
    caller.join(TIMEOUT)
    assert len(outcome) == 1 and isinstance(outcome[0], helpers.SaveFailedError)
    assert str(outcome[0]) == "write 0 failed"
    assert not entered[1].is_set()  # the second write was not queued
    writer.finalize()
    assert not (tmp_path / "first").exists() and not (tmp_path / "second").exists()


class RecordingProcessQueueWriter(ProcessQueueWriter):
    def create_consumer(self, q: Any) -> Any:
        self.consumer = super().create_consumer(q)
        return self.consumer


def test_a_call_blocked_on_a_killed_consumer_fails_instead_of_hanging(
    tmp_path: Path, helpers: ModuleType
) -> None:
    entered, release = _events(True, 4), _events(True, 4)
    writer = RecordingProcessQueueWriter(
        helpers.GatedSave(entered, release), max_pending=2, mp_context="fork"
    )
    writer("a", str(tmp_path), {"i": 0})
    writer("b", str(tmp_path), {"i": 1})
    assert entered[0].wait(TIMEOUT)
    outcome: list[BaseException | None] = []

    def third_call() -> None:
        try:
            writer("c", str(tmp_path), {"i": 2})
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=third_call)
    caller.start()
    os.kill(writer.consumer.pid, signal.SIGKILL)
    caller.join(TIMEOUT)
    assert not caller.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError)
    assert re.search(r"consumer exited with code -9 before writing '.*a'", str(outcome[0]))
    if sys.version_info >= (3, 11):  # b failed too
        assert "1 later write(s) of the same writer failed too" in outcome[0].__notes__
    writer.finalize()
    release[3].set()
    writer("d", str(tmp_path), {"i": 3})  # a new consumer
    writer.finalize()
    assert torch.load(tmp_path / "d", weights_only=False)["i"] == 3
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


class DyingConsumerWriter(ThreadQueueWriter):
    def consume(self, q: Any) -> None:
        q.get()
        raise RuntimeError("consumer bug")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_consumer_thread_fails_its_writes_and_is_replaced(tmp_path: Path) -> None:
    writer = DyingConsumerWriter(max_pending=1)
    writer("lost", str(tmp_path), {"i": 0})
    with pytest.raises(RuntimeError, match=r"consumer stopped before writing '.*lost'"):
        writer("next", str(tmp_path), {"i": 1})  # waits for a slot, finds the consumer dead
    writer.finalize()


def test_at_most_max_pending_copies_exist_while_the_disk_is_stalled(
    tmp_path: Path, helpers: ModuleType
) -> None:
    # Ten snapshots requested while the disk is stalled: the writer never holds
    # more than max_pending copies (the first two), the caller waits.
    count = 10
    entered, release = _events(False, count), _events(False, count)
    writer = ThreadQueueWriter(helpers.GatedSave(entered, release), max_pending=2)
    CopyCounter.copies = 0
    producer = Producer(writer, tmp_path, count, counted=True)
    assert entered[0].wait(TIMEOUT)
    assert producer.returned[1].wait(TIMEOUT)
    assert CopyCounter.copies == 2 and not producer.returned[2].is_set()
    for event in release:
        event.set()
    producer.join()
    writer.finalize()
    assert CopyCounter.copies == count
    assert sorted(os.listdir(tmp_path)) == sorted(f"snapshot_{i}" for i in range(count))


def test_copy_of_the_state_is_still_taken_at_call_time_under_backpressure(
    tmp_path: Path, helpers: ModuleType
) -> None:
    entered, release = _events(False, 3), _events(False, 3)
    writer = ThreadQueueWriter(helpers.GatedSave(entered, release), max_pending=1)
    weight = torch.zeros(3)
    writer("s0", str(tmp_path), {"i": 0, "w": weight})
    assert entered[0].wait(TIMEOUT)
    weight.add_(1)
    for event in release:
        event.set()
    writer("s1", str(tmp_path), {"i": 1, "w": weight})  # waits for s0, then copies
    weight.add_(1)
    writer.finalize()
    assert torch.equal(torch.load(tmp_path / "s0")["w"], torch.zeros(3))
    assert torch.equal(torch.load(tmp_path / "s1")["w"], torch.ones(3))


def _anonymous_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/PID/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_process_queue_writer_memory_does_not_grow_write_after_write(tmp_path: Path) -> None:
    # Each write used to leave ~8 MB of heap behind in both processes (the packed copy
    # was moved to shared memory by pickling, and copied out again by the consumer).
    state = {"w": torch.randn(2 << 20)}  # 8 MiB
    writer = RecordingProcessQueueWriter(max_pending=2, mp_context="fork")
    for i in range(10):
        writer(f"warm_{i % 2}", str(tmp_path), state)
    before = _anonymous_mib(os.getpid()), _anonymous_mib(writer.consumer.pid)
    for i in range(40):
        writer(f"snapshot_{i % 2}", str(tmp_path), state)
    after = _anonymous_mib(os.getpid()), _anonymous_mib(writer.consumer.pid)
    writer.finalize()
    # 40 writes of 8 MiB: the old growth was ~320 MiB in each process.
    assert after[0] - before[0] < 100 and after[1] - before[1] < 100, (before, after)
    assert torch.equal(torch.load(tmp_path / "snapshot_1")["w"], state["w"])
