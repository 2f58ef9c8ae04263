from __future__ import annotations

import contextlib
import inspect
import threading
import time
import timeit
from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[TimeSummary]:
    """Empty this thread's TimeSummary and use a fresh global tracer, tracing switched off."""
    get_time_summary().summary(clear=True)
    clear_tracer()
    enable_global_trace(False)
    enable_thread_trace(None)
    yield get_time_summary()
    enable_global_trace(False)
    enable_thread_trace(None)
    clear_tracer()


def _recorded() -> dict[str, float]:
    summary, _ = get_time_summary().summary(clear=True)
    return summary.compute_mean()


def _counts() -> dict[str, float]:
    summary, _ = get_time_summary().summary(clear=True)
    return {key: state["_n"] for key, state in summary.state_dict().items()}


def _traced_names() -> list[str]:
    tracer = get_tracer()
    assert isinstance(tracer, ChromeTracer)
    return [event["name"] for event in tracer.get_events()]


def test_enabled_record_reports_the_time_to_the_time_summary() -> None:
    with record("forward", enable=True) as notification:
        time.sleep(0.01)
    assert notification is not None
    assert _recorded()["forward"] >= 0.01


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


def _min_cost(stmt: Any, number: int = 2000) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=7)) / number


def test_disabled_record_costs_about_as_much_as_a_nullcontext() -> None:
    def disabled() -> None:
        with record("x", enable=False):
            pass

    def null() -> None:
        with contextlib.nullcontext():
            pass

    assert _min_cost(disabled) < 2 * _min_cost(null) + 0.5e-6


def test_trace_true_adds_the_section_to_the_tracer_only_when_asked() -> None:
    with record("untraced"):
        pass
    with record("traced", trace=True):
        time.sleep(0.002)
    with record("trace_only", enable=False, trace=True):
        pass
    events = get_tracer().get_events()  # type: ignore[attr-defined]
    assert [e["name"] for e in events] == ["traced", "trace_only"]
    assert events[0]["dur"] >= 2000
    assert set(_recorded()) == {"untraced", "traced"}


def test_nested_sections_nest_in_the_trace() -> None:
    with record("outer", trace=True):
        time.sleep(0.001)
        with record("inner", trace=True):
            time.sleep(0.001)
    inner, outer = get_tracer().get_events()  # type: ignore[attr-defined]
    assert (inner["name"], outer["name"]) == ("inner", "outer")
    assert outer["ts"] <= inner["ts"]
    assert inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_global_trace_traces_every_record_in_every_thread() -> None:
    enable_global_trace(True)
    with record("main"):
        pass

    def in_thread() -> None:
        with record("thread"):
            pass

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert sorted(_traced_names()) == ["main", "thread"]


def test_thread_trace_overrides_the_global_switch_in_its_thread_only() -> None:
    enable_global_trace(True)
    enable_thread_trace(False)
    with record("muted"):
        pass
    with record("explicit", trace=True):
        pass

    def in_thread() -> None:
        with record("other_thread"):
            pass

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    enable_global_trace(False)
    enable_thread_trace(True)
    with record("thread_on"):
        pass
    assert sorted(_traced_names()) == ["explicit", "other_thread", "thread_on"]


def test_record_function_records_each_call() -> None:
    @record_function("double")
    def double(x: int) -> int:
        """Docstring kept."""
        return 2 * x

    assert [double(i) for i in range(3)] == [0, 2, 4]
    assert double.__doc__ == "Docstring kept."
    assert _counts() == {"double": 3}


def test_record_function_without_tag_uses_the_definition_site() -> None:
    @record_function(None, trace=True)
    def helper() -> None:
        pass

    line = helper.__wrapped__.__code__.co_firstlineno  # type: ignore[attr-defined]
    helper()
    name = f"{__name__}:{line}:{helper.__qualname__}"
    assert _traced_names() == [name]
    assert list(_recorded()) == [name]


def test_record_function_records_calls_that_raise() -> None:
    @record_function("fails")
    def fails() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        fails()
    assert _counts() == {"fails": 1}


def test_record_iterable_records_each_next_under_the_tag() -> None:
    def slow_items() -> Iterator[int]:
        for i in range(3):
            time.sleep(0.005)
            yield i

    items = list(record_iterable("data", slow_items(), trace=True))
    assert items == [0, 1, 2]
    assert _traced_names() == ["data-0", "data-1", "data-2"]  # the final next() is not recorded
    summary, extrema = get_time_summary().summary(clear=True)
    assert summary.state_dict()["data"]["_n"] == 3
    assert extrema["data.min"] >= 0.005


def test_record_iterable_with_divide_metric_reports_each_item_separately() -> None:
    assert list(record_iterable("batch", ["a", "b"], divide_metric=True)) == ["a", "b"]
    assert _counts() == {"batch-0": 1, "batch-1": 1}


def test_record_iterable_measures_only_next_not_the_loop_body() -> None:
    for _ in record_iterable("fast", range(2)):
        time.sleep(0.02)
    assert _recorded()["fast"] < 0.02


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
