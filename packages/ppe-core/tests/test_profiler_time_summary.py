from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.profiler import TimeSummary, get_time_summary
from pytorch_pfn_extras.reporting import DictSummary


class FakeClock:
    """A clock that only moves when told to: deterministic section times."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _summary_with_clock() -> tuple[TimeSummary, FakeClock]:
    ts = TimeSummary()
    clock = FakeClock()
    ts.clock = clock
    return ts, clock


def test_report_records_the_time_of_the_block_with_mean_std_min_max() -> None:
    ts, clock = _summary_with_clock()
    for seconds in (1.0, 3.0):
        with ts.report("step"):
            clock.advance(seconds)
    clock.advance(50.0)  # between the blocks: not measured
    summary, extrema = ts.summary()
    assert isinstance(summary, DictSummary)
    assert summary.make_statistics() == {"step": 2.0, "step.std": 1.0}
    assert extrema == {"step.min": 1.0, "step.max": 3.0}


def test_the_default_clock_is_a_monotonic_clock_in_seconds() -> None:
    sleep = 0.01
    ts = TimeSummary()
    before = time.perf_counter()
    reading = ts.clock()
    with ts.report("step"):
        time.sleep(sleep)
    after = time.perf_counter()
    (elapsed,) = ts.summary()[0].compute_mean().values()
    # The time base of time.perf_counter (a wall clock reads about 1.7e9 s since the epoch).
    assert before <= reading <= after
    # In seconds: at least the sleep (half of it, for rounding) and at most the time around the
    # section, whatever the load; a clock in milliseconds or finer reads 1000 times too much.
    assert sleep / 2 <= elapsed <= after - before


def test_summary_returns_a_snapshot_and_clear_starts_over() -> None:
    ts = TimeSummary()
    ts.add("a", 1.0)
    kept, _ = ts.summary()
    ts.add("a", 3.0)
    assert kept.compute_mean() == {"a": 1.0}
    summary, extrema = ts.summary(clear=True)
    assert summary.compute_mean() == {"a": 2.0}
    assert extrema == {"a.min": 1.0, "a.max": 3.0}
    empty, no_extrema = ts.summary()
    assert empty.compute_mean() == {}
    assert no_extrema == {}


def test_summary_can_be_used_as_a_context_manager() -> None:
    ts = TimeSummary()
    ts.add("load", 0.5)
    with ts.summary(clear=True) as (summary, extrema):
        assert summary.compute_mean() == {"load": 0.5}
        assert extrema == {"load.min": 0.5, "load.max": 0.5}
    assert ts.summary()[1] == {}


def test_add_accepts_tensors_and_numbers() -> None:
    ts = TimeSummary()
    ts.add("x", torch.tensor(2.0))
    ts.add("x", 4)
    summary, extrema = ts.summary()
    assert summary.compute_mean() == {"x": 3.0}
    assert extrema == {"x.min": 2.0, "x.max": 4.0}


def test_a_section_that_raises_is_still_recorded() -> None:
    ts = TimeSummary()
    with pytest.raises(KeyError), ts.report("lookup"):
        raise KeyError("missing")
    assert list(ts.summary()[0].compute_mean()) == ["lookup"]


def test_deferred_report_is_recorded_when_completed() -> None:
    ts, clock = _summary_with_clock()
    with ts.report("async") as notification:
        notification.defer()
    assert ts.summary()[0].compute_mean() == {}
    clock.advance(0.5)
    notification.complete()
    assert ts.summary()[0].compute_mean() == {"async": 0.5}
    with pytest.raises(RuntimeError, match="'async' was already completed"):
        notification.complete()


def test_concurrent_reports_from_threads_are_all_counted() -> None:
    ts = TimeSummary()

    def work() -> None:
        for _ in range(200):
            with ts.report("work"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ts.summary()[0].state_dict()["work"]["_n"] == 800


class _CompletedReports(TimeSummary):
    """A subclass that sees every completed report, as PPE users write them."""

    def __init__(self) -> None:
        super().__init__()
        self.completed: list[tuple[str, bool, Any, float]] = []

    def complete_report(self, tag: str, use_cuda: bool, begin_event: Any, begin: float) -> None:
        self.completed.append((tag, use_cuda, begin_event, begin))
        super().complete_report(tag, use_cuda, begin_event, begin)


def test_complete_report_receives_every_report_and_can_be_overridden() -> None:
    ts = _CompletedReports()
    clock = FakeClock()
    ts.clock = clock
    with ts.report("forward"):
        clock.advance(2.0)
    with ts.report("deferred") as notification:
        notification.defer()
    clock.advance(1.0)
    notification.complete()
    assert ts.completed == [("forward", False, None, 1000.0), ("deferred", False, None, 1002.0)]
    assert ts.summary()[0].compute_mean() == {"forward": 2.0, "deferred": 1.0}


def test_complete_report_called_directly_records_from_begin_to_now() -> None:
    ts, clock = _summary_with_clock()
    begin = clock()
    clock.advance(4.0)
    ts.complete_report(tag="io", use_cuda=False, begin_event=None, begin=begin)
    assert ts.summary()[1] == {"io.min": 4.0, "io.max": 4.0}
    params = list(inspect.signature(TimeSummary.complete_report).parameters)
    assert params == ["self", "tag", "use_cuda", "begin_event", "begin"]


def test_get_time_summary_is_one_instance_per_thread() -> None:
    mine = get_time_summary()
    assert get_time_summary() is mine
    others: list[TimeSummary] = []
    thread = threading.Thread(target=lambda: others.append(get_time_summary()))
    thread.start()
    thread.join()
    assert others[0] is not mine
    assert isinstance(others[0], TimeSummary)


@pytest.mark.parametrize("size", [0, -1, 1.5, None])
def test_max_queue_size_must_be_a_positive_int(size: object) -> None:
    with pytest.raises(ValueError, match="max_queue_size must be a positive int"):
        TimeSummary(max_queue_size=size)  # type: ignore[arg-type]


def test_initialize_starts_and_finalize_stops_the_worker_thread() -> None:
    ts = TimeSummary(auto_init=False)

    def workers() -> int:
        return sum(t.name == "ppe-time-summary" and t.is_alive() for t in threading.enumerate())

    before = workers()
    ts.initialize()
    ts.initialize()  # idempotent
    assert workers() == before + 1
    ts.synchronize()
    ts.finalize()
    assert workers() == before
    ts.finalize()  # idempotent
    ts.synchronize()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_use_cuda_without_cuda_is_a_clear_error() -> None:
    ts = TimeSummary()
    with (
        pytest.raises(RuntimeError, match=r"use_cuda=True\) needs CUDA"),
        ts.report("x", use_cuda=True),
    ):
        pass


@pytest.mark.gpu
def test_use_cuda_records_gpu_time_from_the_worker_thread() -> None:
    ts = TimeSummary()
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):
        with ts.report("matmul", use_cuda=True):
            for _ in range(10):
                a = (a @ a).tanh()
    summary, extrema = ts.summary()
    mean = summary.compute_mean()
    assert mean["matmul.cuda"] > 0
    assert extrema["matmul.cuda.min"] <= extrema["matmul.cuda.max"]
    assert set(mean) == {"matmul", "matmul.cuda"}
    ts.finalize()


@pytest.mark.gpu
def test_use_cuda_with_auto_init_disabled_needs_initialize() -> None:
    ts = TimeSummary(auto_init=False)
    with pytest.raises(RuntimeError, match="needs initialize"), ts.report("x", use_cuda=True):
        pass
    ts.initialize()
    with ts.report("x", use_cuda=True):
        torch.ones(10, device="cuda").sum()
    assert "x.cuda" in ts.summary()[0].compute_mean()
    ts.finalize()
