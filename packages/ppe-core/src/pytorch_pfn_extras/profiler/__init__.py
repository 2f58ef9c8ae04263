"""Measure where time goes: per-section timings, torch.profiler annotations and Chrome traces.

Example:
    >>> from pytorch_pfn_extras.profiler import get_time_summary, record
    >>> with record("forward"):
    ...     y = model(x)
    >>> summary, extrema = get_time_summary().summary(clear=True)
"""

from __future__ import annotations

from pytorch_pfn_extras.profiler._chrome_tracer import ChromeTracer, load_chrome_trace_as_json
from pytorch_pfn_extras.profiler._record import record, record_function, record_iterable
from pytorch_pfn_extras.profiler._time_summary import TimeSummary, get_time_summary
from pytorch_pfn_extras.profiler._trace_state import (
    clear_tracer,
    enable_global_trace,
    enable_thread_trace,
    get_tracer,
)
from pytorch_pfn_extras.profiler._traceable_dataset import TraceableDataset
from pytorch_pfn_extras.profiler._tracer import Tracer

__all__ = [
    "ChromeTracer",
    "TimeSummary",
    "TraceableDataset",
    "Tracer",
    "clear_tracer",
    "enable_global_trace",
    "enable_thread_trace",
    "get_time_summary",
    "get_tracer",
    "load_chrome_trace_as_json",
    "record",
    "record_function",
    "record_iterable",
]
