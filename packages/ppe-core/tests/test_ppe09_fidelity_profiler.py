"""PPE 0.9 user code: ``record(..., trace=<a tracer>)`` traces into that tracer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras.profiler import ChromeTracer, Tracer


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """A fresh global tracer and TimeSummary, tracing switches on."""
    ppe.profiler.get_time_summary().summary(clear=True)
    ppe.profiler.clear_tracer()
    ppe.profiler.enable_global_trace(True)
    ppe.profiler.enable_thread_trace(True)
    yield
    ppe.profiler.enable_global_trace(True)
    ppe.profiler.enable_thread_trace(True)
    ppe.profiler.clear_tracer()
    ppe.profiler.get_time_summary().summary(clear=True)


def _names(tracer: ChromeTracer) -> list[str]:
    return [event["name"] for event in tracer.get_events()]


class _FalsyTracer(Tracer):
    """A user's tracer that is falsy while it holds no event (it defines ``__len__``)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __len__(self) -> int:
        return len(self.names)

    @contextlib.contextmanager
    def add_event(self, name: str) -> Iterator[None]:
        yield None
        self.names.append(name)


def test_record_traces_into_the_given_tracer_not_the_global_one() -> None:
    tracer = ChromeTracer()
    with ppe.profiler.record("step", trace=tracer):
        pass
    with ppe.profiler.record("global", trace=True):
        pass
    assert _names(tracer) == ["step"]
    event = tracer.get_events()[0]
    assert event["ph"] == "X" and event["dur"] >= 0
    global_tracer = ppe.profiler.get_tracer()
    assert isinstance(global_tracer, ChromeTracer)
    assert _names(global_tracer) == ["global"]
    # The section is still timed in the TimeSummary.
    summary, _ = ppe.profiler.get_time_summary().summary(clear=True)
    assert set(summary.compute_mean()) == {"step", "global"}


def test_record_traces_into_an_empty_tracer_that_is_falsy() -> None:
    tracer = _FalsyTracer()
    assert not tracer
    with ppe.profiler.record("first", trace=tracer):
        pass
    assert tracer.names == ["first"]
    tracer.names.clear()  # falsy again
    with ppe.profiler.record("trace_only", enable=False, trace=tracer):
        pass
    assert tracer.names == ["trace_only"]


def test_record_function_and_record_iterable_trace_into_the_given_tracer() -> None:
    tracer = ChromeTracer()

    @ppe.profiler.record_function("fn", trace=tracer)
    def fn(x: int) -> int:
        return x + 1

    assert fn(1) == 2
    items = list(ppe.profiler.record_iterable("data", [10, 20], trace=tracer))
    assert items == [10, 20]
    assert _names(tracer) == ["fn", "data-0", "data-1"]


@pytest.mark.parametrize("switch", ["global", "thread", "tracer"])
def test_the_switches_and_a_disabled_tracer_stop_tracing_into_the_given_tracer(
    switch: str,
) -> None:
    tracer = ChromeTracer()
    if switch == "global":
        ppe.profiler.enable_global_trace(False)
    elif switch == "thread":
        ppe.profiler.enable_thread_trace(False)
    else:
        tracer.enable(False)
    with ppe.profiler.record("off", trace=tracer):
        pass
    assert _names(tracer) == []
    ppe.profiler.enable_global_trace(True)
    ppe.profiler.enable_thread_trace(True)
    tracer.enable(True)
    with ppe.profiler.record("on", trace=tracer):
        pass
    assert _names(tracer) == ["on"]


def test_trace_false_and_true_keep_their_meaning() -> None:
    tracer = ChromeTracer()
    with ppe.profiler.record("untraced", trace=False):
        pass
    with ppe.profiler.record("traced", trace=True):
        pass
    assert _names(tracer) == []
    global_tracer = ppe.profiler.get_tracer()
    assert isinstance(global_tracer, ChromeTracer)
    assert _names(global_tracer) == ["traced"]
