"""``record``: one annotation for torch.profiler, the TimeSummary and the tracer."""

from __future__ import annotations

import builtins
import contextlib
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from types import FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar

import torch

from pytorch_pfn_extras.profiler._chrome_tracer import _ChromeEvent
from pytorch_pfn_extras.profiler._time_summary import _ReportNotification, get_time_summary
from pytorch_pfn_extras.profiler._trace_state import _current_tracer, _trace_enabled
from pytorch_pfn_extras.profiler._tracer import Tracer

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

_DISABLED: contextlib.nullcontext[None] = contextlib.nullcontext()

# record_function costs several microseconds even when no profiler runs; skip it then. The
# check is not a documented torch API, so without it every section is annotated.
_profiler_enabled: Callable[[], bool] = getattr(torch.autograd, "_profiler_enabled", lambda: True)


def _frame_tag(frame: FrameType | None) -> str:
    if frame is None:
        return "<unknown>"
    module = frame.f_globals.get("__name__", "<unknown>")
    return f"{module}:{frame.f_lineno}:{frame.f_code.co_name}"


class _Record:
    __slots__ = (
        "_device",
        "_enable",
        "_event",
        "_metric",
        "_report",
        "_rf",
        "_tag",
        "_trace",
        "_use_cuda",
    )

    def __init__(
        self,
        tag: str,
        metric: str,
        use_cuda: bool,
        enable: bool,
        device: Any,
        trace: Tracer | bool,
    ) -> None:
        self._tag = tag
        self._metric = metric
        self._use_cuda = use_cuda
        self._enable = enable
        self._device = device
        self._trace = trace
        self._rf: torch.profiler.record_function | None = None
        self._report: _ReportNotification | None = None
        self._event: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> _ReportNotification | None:
        if self._enable:
            if _profiler_enabled():
                rf = self._rf = torch.profiler.record_function(self._tag)
                rf.__enter__()  # type: ignore[no-untyped-call]
            device = None
            if self._use_cuda:
                device = torch.device(self._device)
                if device.type != "cuda":
                    device = None  # the current CUDA device
            report = self._report = _ReportNotification(
                get_time_summary(), self._metric, self._use_cuda, device
            )
            report.__enter__()
        trace = self._trace
        if trace is not False:
            tracer = trace if isinstance(trace, Tracer) else _current_tracer()
            event = self._event = tracer.add_event(self._tag)
            event.__enter__()
        return self._report

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._event is not None:
            self._event.__exit__(exc_type, exc_value, traceback)
        if self._report is not None:
            self._report.__exit__(exc_type, exc_value, traceback)
        if self._rf is not None:
            self._rf.__exit__(exc_type, exc_value, traceback)

    def _discard(self) -> None:
        """Leave the section without recording it in the TimeSummary or a ChromeTracer."""
        if isinstance(self._event, _ChromeEvent):
            self._event.discard()
        if self._report is not None:
            self._report.defer()


def record(
    tag: str | None,
    metric: str | None = None,
    use_cuda: bool = False,
    enable: bool = True,
    device: str | torch.device = "cpu",
    trace: bool | Tracer = False,
) -> contextlib.AbstractContextManager[_ReportNotification | None]:
    """Context manager that records a code section everywhere it is useful.

    With ``enable=True`` the section is annotated for ``torch.profiler`` (``record_function``)
    and its time is reported to this thread's TimeSummary (:func:`get_time_summary`) under
    ``metric``. With ``trace=True`` it is also added as an event to the global tracer
    (:func:`get_tracer`), and with ``trace=<a Tracer>`` to that tracer, unless tracing is
    switched off globally (:func:`enable_global_trace`) or in this thread
    (:func:`enable_thread_trace`); a tracer that is disabled (``tracer.enable(False)``)
    records nothing either. With everything off it costs about as much as
    ``contextlib.nullcontext()``.

    Args:
        tag: Name of the section; ``None`` names it ``"<module>:<line>:<function>"`` of the
            caller.
        metric: Name in the TimeSummary; ``None`` uses ``tag``.
        use_cuda: Also time the section on the GPU (``"<metric>.cuda"``).
        enable: Annotate for torch.profiler and report to the TimeSummary.
        device: Device whose current CUDA stream is timed when ``use_cuda`` is True
            (``"cpu"``: the current CUDA device).
        trace: Add the section to the global tracer's timeline (``True``) or to the
            given :class:`Tracer`'s.

    Returns:
        A context manager whose value is the TimeSummary report (with ``defer()`` and
        ``complete()``), or ``None`` when ``enable`` is False.

    Example:
        >>> with record("forward", trace=True):
        ...     y = model(x)
        >>> tracer = ChromeTracer()
        >>> with record("backward", trace=tracer):  # into this tracer, not the global one
        ...     loss.backward()
    """
    traced: Tracer | bool
    if isinstance(trace, Tracer):  # by type: a tracer that defines ``__len__`` may be falsy
        traced = trace if _trace_enabled() else False
    else:
        traced = bool(trace) and _trace_enabled()
    if not enable and traced is False:
        return _DISABLED
    if tag is None:
        tag = _frame_tag(sys._getframe(1))
    return _Record(tag, tag if metric is None else metric, use_cuda, enable, device, traced)


def record_function(
    tag: str | None,
    use_cuda: bool = False,
    enable: bool = True,
    device: str | torch.device = "cpu",
    trace: bool | Tracer = False,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorator that wraps every call of the function in :func:`record`.

    Args:
        tag: Name of the section; ``None`` uses the function's ``__name__``.
        use_cuda: See :func:`record`.
        enable: See :func:`record`.
        device: See :func:`record`.
        trace: See :func:`record`.

    Example:
        >>> @record_function("preprocess")
        ... def preprocess(batch):
        ...     return batch.float() / 255
    """

    def decorator(func: Callable[_P, _R]) -> Callable[_P, _R]:
        name = tag if tag is not None else getattr(func, "__name__", type(func).__name__)

        @functools.wraps(func)
        def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with record(name, None, use_cuda, enable, device, trace):
                return func(*args, **kwargs)

        return wrapped

    return decorator


def record_iterable(
    tag: str | None,
    iter: Iterable[_T],
    divide_metric: bool = False,
    use_cuda: bool = False,
    enable: bool = True,
    device: str | torch.device = "cpu",
    trace: bool | Tracer = False,
) -> Iterator[_T]:
    """Iterate over ``iter``, recording each ``next()`` as ``"<tag>-<i>"``.

    Useful to see how long a DataLoader takes to produce each batch. The final ``next()`` that
    ends the iteration is not recorded (a custom :class:`Tracer` receives its event).

    Args:
        tag: Prefix of the section names; ``None`` uses ``"<module>:<line>:<function>"`` of the
            caller.
        iter: What to iterate over.
        divide_metric: Report each item under its own TimeSummary name ``"<tag>-<i>"``
            instead of aggregating all of them under ``tag``.
        use_cuda: See :func:`record`.
        enable: See :func:`record`.
        device: See :func:`record`.
        trace: See :func:`record`.

    Example:
        >>> for x, t in record_iterable("data", loader):
        ...     train_step(x, t)
    """
    if tag is None:
        tag = _frame_tag(sys._getframe(1))
    iterator = builtins.iter(iter)
    return _record_iterable(tag, iterator, divide_metric, use_cuda, enable, device, trace)


def _record_iterable(
    tag: str,
    iterator: Iterator[_T],
    divide_metric: bool,
    use_cuda: bool,
    enable: bool,
    device: str | torch.device,
    trace: bool | Tracer,
) -> Iterator[_T]:
    i = 0
    while True:
        name = f"{tag}-{i}"
        section = record(name, name if divide_metric else tag, use_cuda, enable, device, trace)
        with section:
            try:
                item = next(iterator)
            except StopIteration:
                if isinstance(section, _Record):
                    section._discard()
                return
        yield item
        i += 1
