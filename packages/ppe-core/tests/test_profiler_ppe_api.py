"""The profiler and reporting APIs have PPE 0.9's parameters, and its extension points work."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import profiler, reporting
from pytorch_pfn_extras.profiler import (
    ChromeTracer,
    clear_tracer,
    get_tracer,
    record,
)

# Parameters (names, order, kinds, defaults) of PPE 0.9's public functions and methods.
PPE_SIGNATURES = """
profiler.ChromeTracer.__init__(self, max_event_count=None, enable=True, append=True)
profiler.ChromeTracer.add_event(self, name)
profiler.ChromeTracer.add_remote_event(self, name, event)
profiler.ChromeTracer.clear(self)
profiler.ChromeTracer.enable(self, enable_flag)
profiler.ChromeTracer.finalize(self)
profiler.ChromeTracer.flush(self, filename, writer)
profiler.ChromeTracer.initialize_writer(self, filename, writer)
profiler.ChromeTracer.load_state_dict(self, to_load)
profiler.ChromeTracer.state_dict(self)
profiler.TimeSummary.__init__(self, *, max_queue_size=1000, auto_init=True)
profiler.TimeSummary.add(self, name, value)
profiler.TimeSummary.complete_report(self, tag, use_cuda, begin_event, begin)
profiler.TimeSummary.finalize(self)
profiler.TimeSummary.initialize(self)
profiler.TimeSummary.report(self, tag, use_cuda=False)
profiler.TimeSummary.summary(self, clear=False)
profiler.TimeSummary.synchronize(self)
profiler.TraceableDataset.__init__(self, dataset, tag, tracer=None)
profiler.Tracer.__init__(self, /, *args, **kwargs)
profiler.Tracer.add_event(self, name)
profiler.Tracer.add_remote_event(self, name, value)
profiler.Tracer.clear(self)
profiler.Tracer.enable(self, enable_flag)
profiler.Tracer.finalize(self)
profiler.Tracer.flush(self, filename, writer)
profiler.Tracer.initialize_writer(self, filename, writer)
profiler.Tracer.load_state_dict(self, to_load)
profiler.Tracer.state_dict(self)
profiler.clear_tracer()
profiler.enable_global_trace(enable)
profiler.enable_thread_trace(enable)
profiler.get_time_summary()
profiler.get_tracer(tracer_cls=ChromeTracer, *params)
profiler.load_chrome_trace_as_json(filename)
profiler.record(tag, metric=None, use_cuda=False, enable=True, device='cpu', trace=False)
profiler.record_function(tag, use_cuda=False, enable=True, device='cpu', trace=False)
profiler.record_iterable(tag, iter, divide_metric=False, use_cuda=False, enable=True, device='cpu', trace=False)
reporting.DictSummary.__init__(self)
reporting.DictSummary.add(self, d)
reporting.DictSummary.compute_mean(self)
reporting.DictSummary.load_state_dict(self, to_load)
reporting.DictSummary.make_statistics(self)
reporting.DictSummary.state_dict(self)
reporting.Summary.__init__(self)
reporting.Summary.add(self, value, weight=1)
reporting.Summary.compute_mean(self)
reporting.Summary.load_state_dict(self, to_load)
reporting.Summary.make_statistics(self)
reporting.Summary.state_dict(self)
"""
EXPECTED = [line.split("(", 1) for line in PPE_SIGNATURES.split("\n") if line]


def _ppe_style(func: Callable[..., Any]) -> str:
    """The signature as PPE's list writes it: no annotations, the default tracer by name."""
    empty = inspect.Parameter.empty
    params = []
    for param in inspect.signature(func).parameters.values():
        default = empty if param.default is ChromeTracer else param.default
        params.append(param.replace(annotation=empty, default=default))
    text = str(inspect.Signature(params))
    return text.replace("(tracer_cls,", "(tracer_cls=ChromeTracer,")


@pytest.mark.parametrize(("path", "parameters"), EXPECTED, ids=[path for path, _ in EXPECTED])
def test_signature_matches_ppe(path: str, parameters: str) -> None:
    module, *names = path.split(".")
    obj: Any = {"profiler": profiler, "reporting": reporting}[module]
    for name in names:
        obj = getattr(obj, name)
    assert _ppe_style(obj) == f"({parameters}"


class _AnnotatingTracer(ChromeTracer):
    """Overrides add_event, as a PPE user may, to annotate every event."""

    def add_event(self, name: str) -> Any:
        return _Annotated(super().add_event(name))


class _Annotated:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __enter__(self) -> Any:
        event = self._inner.__enter__()
        if event is not None:
            event["args"] = {"annotated": True}
        return event

    def __exit__(self, *exc_info: Any) -> None:
        self._inner.__exit__(*exc_info)


def test_an_overridden_add_event_is_what_record_uses() -> None:
    clear_tracer()
    try:
        tracer = get_tracer(_AnnotatingTracer)
        with record("step", trace=True):
            pass
        assert [(e["name"], e["args"]) for e in tracer.get_events()] == [  # type: ignore[attr-defined]
            ("step", {"annotated": True})
        ]
    finally:
        clear_tracer()


def test_load_state_dict_takes_to_load_by_name() -> None:
    summary = reporting.Summary()
    summary.load_state_dict(to_load={"_x": 3.0, "_x2": 9.0, "_n": 1.0})
    assert summary.compute_mean() == 3.0
    summaries = reporting.DictSummary()
    summaries.load_state_dict(to_load={"a": {"_x": 4.0, "_x2": 16.0, "_n": 2.0}})
    assert summaries.compute_mean() == {"a": 2.0}
    tracer = ChromeTracer()
    tracer.load_state_dict(to_load={"events": [{"name": "e", "ph": "X"}]})
    assert tracer.get_events() == [{"name": "e", "ph": "X"}]
    summary.add(torch.tensor(5.0))
    assert isinstance(summary.compute_mean(), torch.Tensor)
