from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.profiler import (
    ChromeTracer,
    TimeSummary,
    clear_tracer,
    enable_global_trace,
    enable_thread_trace,
    get_time_summary,
    get_tracer,
    record,
    record_function,
    record_iterable,
)


class FakeClock:
    """A clock that only moves when told to: deterministic section times."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """Empty this thread's TimeSummary and use a fresh global tracer, tracing switches on."""
    get_time_summary().summary(clear=True)
    clear_tracer()
    enable_global_trace(True)
    enable_thread_trace(True)
    yield
    enable_global_trace(True)
    enable_thread_trace(True)
    clear_tracer()


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """Make this thread's TimeSummary measure with a FakeClock."""
    summary = get_time_summary()
    fake = FakeClock()
    summary.clock = fake
    yield fake
    summary.clock = TimeSummary().clock


def _recorded() -> dict[str, Any]:
    summary, _ = get_time_summary().summary(clear=True)
    return summary.compute_mean()


def _counts() -> dict[str, float]:
    summary, _ = get_time_summary().summary(clear=True)
    return {key: state["_n"] for key, state in summary.state_dict().items()}


def _traced_names() -> list[str]:
    tracer = get_tracer()
    assert isinstance(tracer, ChromeTracer)
    return [event["name"] for event in tracer.get_events()]


def _python_calls(section: Callable[[], None]) -> list[str]:
    """Names of the Python functions that ``section()`` calls (its own call excluded)."""
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        section()
    finally:
        sys.setprofile(None)
    return calls[1:]


def test_enabled_record_reports_the_time_to_the_time_summary(clock: FakeClock) -> None:
    with record("forward", enable=True) as notification:
        clock.advance(0.25)
    assert notification is not None
    assert _recorded() == {"forward": 0.25}


def test_metric_names_the_time_summary_entry() -> None:
    for i in range(3):
        with record(f"batch-{i}", metric="batch"):
            pass
    assert _counts() == {"batch": 3}


def test_tag_none_is_named_after_the_caller() -> None:
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    with record(None, trace=True):
        pass
    expected = f"{__name__}:{line}:test_tag_none_is_named_after_the_caller"
    assert list(_recorded()) == [expected]
    assert _traced_names() == [expected]


def test_disabled_record_records_nothing() -> None:
    with record("nothing", enable=False) as value:
        pass
    assert value is None
    assert _recorded() == {}
    assert _traced_names() == []


def test_record_annotates_the_torch_profiler() -> None:
    x = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with record("ppe_matmul_section"):
            x @ x
        with record("ppe_disabled_section", enable=False):
            x @ x
    names = {event.key for event in prof.key_averages()}
    assert "ppe_matmul_section" in names
    assert "ppe_disabled_section" not in names
    assert "ppe_matmul_section" in _recorded()


def test_record_outside_a_profiler_still_reports_time() -> None:
    with record("no_profiler"):
        pass
    assert "no_profiler" in _recorded()


@pytest.mark.parametrize(
    ("kwargs", "switch_off", "checks"),
    [
        ({"enable": False}, None, []),
        ({"enable": False, "trace": True}, enable_global_trace, ["_trace_enabled"]),
        ({"enable": False, "trace": True}, enable_thread_trace, ["_trace_enabled"]),
    ],
    ids=["disabled", "traced-but-global-trace-off", "traced-but-thread-trace-off"],
)
def test_a_section_with_nothing_to_record_costs_a_null_context(
    kwargs: dict[str, Any], switch_off: Callable[[bool], None] | None, checks: list[str]
) -> None:
    if switch_off is not None:
        switch_off(False)

    def section() -> None:
        with record("x", **kwargs):
            pass

    # record() and the enter and exit of a contextlib.nullcontext, nothing else: no tracer,
    # no TimeSummary, no frame inspection.
    assert _python_calls(section) == ["record", *checks, "__enter__", "__exit__"]
    assert _recorded() == {}
    assert _traced_names() == []


def test_an_untraced_section_does_not_touch_the_tracer() -> None:
    def section() -> None:
        with record("x"):
            pass

    calls = _python_calls(section)
    assert not {"get_tracer", "_current_tracer", "add_event", "_trace_enabled"} & set(calls)
    assert _traced_names() == []


def test_trace_true_adds_the_section_to_the_tracer_only_when_asked() -> None:
    with record("untraced"):
        pass
    with record("traced", trace=True):
        pass
    with record("trace_only", enable=False, trace=True):
        pass
    events = get_tracer().get_events()  # type: ignore[attr-defined]
    assert [e["name"] for e in events] == ["traced", "trace_only"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    assert set(_recorded()) == {"untraced", "traced"}


def test_nested_sections_nest_in_the_trace() -> None:
    with record("outer", trace=True), record("inner", trace=True):
        pass
    inner, outer = get_tracer().get_events()  # type: ignore[attr-defined]
    assert (inner["name"], outer["name"]) == ("inner", "outer")
    assert outer["ts"] <= inner["ts"]
    assert inner["dur"] <= outer["dur"]


def _traced_sections_in_threads(thread_off: int | None) -> int:
    """10 threads record 10 traced sections each; return the number of events."""
    start = threading.Barrier(10)

    def work(index: int) -> None:
        if index == thread_off:
            enable_thread_trace(False)
        start.wait()  # every thread has set its switch before any records
        for _ in range(10):
            with record(f"thread-{index}", trace=True):
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(_traced_names())


def test_tracing_is_on_by_default_in_every_thread() -> None:
    assert _traced_sections_in_threads(thread_off=None) == 100


def test_turning_a_thread_off_suppresses_its_events_only() -> None:
    assert _traced_sections_in_threads(thread_off=0) == 90
    assert sorted(set(_traced_names())) == [f"thread-{i}" for i in range(1, 10)]


def test_turning_the_global_trace_off_suppresses_every_event() -> None:
    enable_global_trace(False)
    assert _traced_sections_in_threads(thread_off=None) == 0
    enable_global_trace(True)
    with record("on_again", trace=True):
        pass
    assert _traced_names() == ["on_again"]


def test_a_new_thread_traces_even_if_the_creating_thread_does_not() -> None:
    enable_thread_trace(False)
    with record("muted", trace=True):
        pass

    def in_thread() -> None:
        with record("other_thread", trace=True):
            pass

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    enable_thread_trace(True)
    with record("back_on", trace=True):
        pass
    assert _traced_names() == ["other_thread", "back_on"]


def test_switching_tracing_off_keeps_the_time_summary() -> None:
    enable_global_trace(False)
    with record("timed", trace=True):
        pass
    assert _traced_names() == []
    assert _counts() == {"timed": 1}


def test_the_switches_apply_to_record_function_and_record_iterable() -> None:
    @record_function("traced_fn", trace=True)
    def traced_fn() -> None:
        pass

    traced_fn()
    list(record_iterable("items", [1], trace=True))
    enable_thread_trace(False)
    traced_fn()
    list(record_iterable("items", [1], trace=True))
    assert _traced_names() == ["traced_fn", "items-0"]


def test_record_function_records_each_call() -> None:
    @record_function("double")
    def double(x: int) -> int:
        """Docstring kept."""
        return 2 * x

    assert [double(i) for i in range(3)] == [0, 2, 4]
    assert double.__doc__ == "Docstring kept."
    assert _counts() == {"double": 3}


def test_record_function_without_tag_is_named_after_the_function() -> None:
    @record_function(None, trace=True)
    def helper() -> None:
        pass

    helper()
    assert _traced_names() == ["helper"]
    assert list(_recorded()) == ["helper"]


def test_record_function_records_calls_that_raise() -> None:
    @record_function("fails")
    def fails() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        fails()
    assert _counts() == {"fails": 1}


def test_record_iterable_records_each_next_under_the_tag(clock: FakeClock) -> None:
    def slow_items() -> Iterator[int]:
        for i in range(3):
            clock.advance(2.0 + i)
            yield i

    items = list(record_iterable("data", slow_items(), trace=True))
    assert items == [0, 1, 2]
    assert _traced_names() == ["data-0", "data-1", "data-2"]  # the final next() is not recorded
    summary, extrema = get_time_summary().summary(clear=True)
    assert summary.state_dict()["data"] == {"_x": 9.0, "_x2": 29.0, "_n": 3.0}
    assert extrema == {"data.min": 2.0, "data.max": 4.0}


def test_record_iterable_takes_its_arguments_by_ppe_names() -> None:
    items = record_iterable(tag="kw", iter=iter("ab"), divide_metric=True)
    assert list(items) == ["a", "b"]
    assert _counts() == {"kw-0": 1, "kw-1": 1}


def test_record_iterable_with_divide_metric_reports_each_item_separately() -> None:
    assert list(record_iterable("batch", ["a", "b"], divide_metric=True)) == ["a", "b"]
    assert _counts() == {"batch-0": 1, "batch-1": 1}


def test_record_iterable_measures_only_next_not_the_loop_body(clock: FakeClock) -> None:
    for _ in record_iterable("fast", range(2)):
        clock.advance(100.0)
    assert _recorded() == {"fast": 0.0}


def test_record_iterable_over_a_dataloader() -> None:
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.arange(10)), batch_size=4
    )
    batches = [batch for (batch,) in record_iterable(None, loader)]
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    (name,) = _counts().keys()
    assert name.startswith(f"{__name__}:") and name.endswith(
        ":test_record_iterable_over_a_dataloader"
    )


def test_record_iterable_disabled_yields_the_items_and_records_nothing() -> None:
    assert list(record_iterable("off", iter([1, 2]), enable=False)) == [1, 2]
    assert _recorded() == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_record_use_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="needs CUDA"), record("x", use_cuda=True):
        pass


@pytest.mark.gpu
def test_record_use_cuda_times_the_device() -> None:
    a = torch.randn(1024, 1024, device="cuda")
    with record("gpu", use_cuda=True, device="cuda:0"):
        (a @ a).sum()
    get_time_summary().synchronize()
    assert {"gpu", "gpu.cuda"} <= set(_recorded())
