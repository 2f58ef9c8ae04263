"""The process-wide tracer, and the switches that turn tracing on for every ``record``."""

from __future__ import annotations

import threading
from typing import Any

from pytorch_pfn_extras.profiler._tracer import ChromeTracer, Tracer

_tracer: Tracer | None = None
_tracer_lock = threading.Lock()
_global_trace = False


class _Local(threading.local):
    def __init__(self) -> None:
        self.trace: bool | None = None  # None: follow enable_global_trace


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
    """Trace every :func:`record` section, in every thread, as if ``trace=True`` were given.

    A thread's :func:`enable_thread_trace` setting takes precedence.
    """
    global _global_trace
    _global_trace = bool(enable)


def enable_thread_trace(enable: bool | None) -> None:
    """Trace (``True``) or not (``False``) every :func:`record` section of the calling thread.

    This overrides :func:`enable_global_trace` in this thread; ``None`` follows it again. An
    explicit ``record(..., trace=True)`` is always traced.
    """
    _local.trace = None if enable is None else bool(enable)


def _trace_enabled() -> bool:
    thread = _local.trace
    return _global_trace if thread is None else thread
