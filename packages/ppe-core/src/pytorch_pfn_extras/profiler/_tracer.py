"""The interface of tracers: what :func:`record`, ``TraceableDataset`` and ``TimelineTrace`` call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class WriterLike(Protocol):
    """What a tracer needs from a ``pytorch_pfn_extras.writing`` writer."""

    @property
    def out_dir(self) -> str: ...

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Callable[..., None] | None = None,
        append: bool = False,
    ) -> None: ...


class Tracer:
    """Records a timeline of named events; subclass it to send events elsewhere.

    :func:`~pytorch_pfn_extras.profiler.record` (with ``trace=True``) and
    :class:`~pytorch_pfn_extras.profiler.TraceableDataset` enter :meth:`add_event` around the
    section they trace. A subclass overrides the methods it supports; the others raise
    ``NotImplementedError``, except :meth:`initialize_writer` and :meth:`finalize`, which do
    nothing by default.

    Example:
        >>> class PrintTracer(Tracer):
        ...     @contextlib.contextmanager
        ...     def add_event(self, name):
        ...         print("begin", name)
        ...         yield None
        ...         print("end", name)
        >>> get_tracer(PrintTracer)
    """

    def _not_implemented(self, method: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not implement {method}()")

    def enable(self, enable_flag: bool) -> None:
        """Start (``True``) or stop (``False``) recording events."""
        raise self._not_implemented("enable")

    def add_event(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """Return a context manager that records its block as an event called ``name``.

        Its value is the tracer's representation of the event (``None`` if it has none), which
        the caller may annotate before the block ends.
        """
        raise self._not_implemented("add_event")

    def add_remote_event(self, name: str, value: Any) -> None:
        """Add an event called ``name`` that was measured elsewhere (another process, say)."""
        raise self._not_implemented("add_remote_event")

    def initialize_writer(self, filename: str, writer: WriterLike) -> None:
        """Prepare ``filename`` in ``writer.out_dir`` for the events that :meth:`flush` writes."""

    def flush(self, filename: str, writer: WriterLike) -> None:
        """Write the recorded events to ``filename`` in ``writer.out_dir`` with ``writer``."""
        raise self._not_implemented("flush")

    def finalize(self) -> None:
        """Write what is left and release the tracer's resources (the end of training)."""

    def clear(self) -> None:
        """Discard the recorded events."""
        raise self._not_implemented("clear")

    def state_dict(self) -> dict[str, Any]:
        """Return the tracer's state (events included), for snapshots."""
        raise self._not_implemented("state_dict")

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        raise self._not_implemented("load_state_dict")
