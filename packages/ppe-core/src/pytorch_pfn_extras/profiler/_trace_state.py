"""The process-wide tracer, and the switches that let ``record(..., trace=True)`` trace."""

from __future__ import annotations

import threading
from typing import Any

from pytorch_pfn_extras.profiler._chrome_tracer import ChromeTracer
from pytorch_pfn_extras.profiler._tracer import Tracer

_tracer: Tracer | None = None
_tracer_lock = threading.Lock()
_global_trace = True


class _Local(threading.local):
    def __init__(self) -> None:
        self.trace = True


_local = _Local()


def get_tracer(tracer_cls: type[Tracer] = ChromeTracer, *params: Any) -> Tracer:
    """Return the process-wide tracer, creating it as ``tracer_cls(*params)`` the first time.

    Args:
        tracer_cls: Class of the tracer to create.
        params: Positional arguments of ``tracer_cls`` (only when it is created).

    Raises:
        ValueError: a tracer exists already and is not a ``tracer_cls``, or ``params`` are given
            for a tracer that exists already (call :func:`clear_tracer` first).

    Example:
        >>> tracer = get_tracer(ChromeTracer, 10_000)  # keep at most 10,000 events
    """
    global _tracer
    with _tracer_lock:
        if _tracer is None:
            _tracer = tracer_cls(*params)
            return _tracer
        if not isinstance(_tracer, tracer_cls):
            message = (
                f"the global tracer is a {type(_tracer).__name__}, not a {tracer_cls.__name__}; "
                "call clear_tracer() first to replace it"
            )
            raise ValueError(message)
        if params:
            message = (
                f"the global tracer exists already, so params {params!r} would be ignored; "
                "call clear_tracer() first to create a new one"
            )
            raise ValueError(message)
        return _tracer


def _current_tracer() -> Tracer:
    tracer = _tracer
    return tracer if tracer is not None else get_tracer()


def clear_tracer() -> None:
    """Forget the process-wide tracer; the next :func:`get_tracer` creates a new one."""
    global _tracer
    with _tracer_lock:
        _tracer = None


def enable_global_trace(enable: bool) -> None:
    """Let (``True``, the default) or stop (``False``) tracing in every thread.

    A section is traced when it asks for it (``record(..., trace=True)``) and both this switch
    and the calling thread's (:func:`enable_thread_trace`) are on.

    Example:
        >>> enable_global_trace(False)  # a run without a timeline: no event is recorded
    """
    global _global_trace
    _global_trace = bool(enable)


def enable_thread_trace(enable: bool) -> None:
    """Let (``True``, the default) or stop (``False``) tracing in the calling thread.

    A section is traced when it asks for it (``record(..., trace=True)``) and both this switch
    and the global one (:func:`enable_global_trace`) are on.

    Example:
        >>> def prefetch():
        ...     enable_thread_trace(False)  # keep this thread off the timeline
        ...     ...
    """
    _local.trace = bool(enable)


def _trace_enabled() -> bool:
    """Whether both the global and the calling thread's switch let sections be traced."""
    return _global_trace and _local.trace
