"""TimelineTrace: writes the Chrome tracer's events to a trace file during training."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.profiler import ChromeTracer, Tracer, get_tracer
from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension, check_keywords
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger
from pytorch_pfn_extras.training.extensions._bytes import write_bytes
from pytorch_pfn_extras.training.extensions._rank_files import RankFiles
from pytorch_pfn_extras.writing import Writer

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

_KWARGS = ("writer",)


def _closing_bytes() -> bytes:
    # A metadata event naming the process ends the appended array, so the file becomes a
    # complete JSON document (the events before it each end with a comma).
    event = {"name": "process_name", "ph": "M", "pid": os.getpid(), "tid": 0}
    event["args"] = {"name": "pytorch-pfn-extras training"}
    return (json.dumps(event) + "\n]\n").encode()


class _Unwritten(Writer):
    """The writer of a rank that writes no trace file: it takes the tracer's flushes and
    writes nothing, so that the events leave memory as they do on the rank that writes."""

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Callable[..., None] | None = None,
        append: bool = False,
    ) -> None:
        return None


class TimelineTrace(Extension):
    """An extension to write the timeline of the Chrome tracer to a trace file.

    The manager records each extension it runs in the process-wide tracer
    (:func:`pytorch_pfn_extras.profiler.get_tracer`) when it is created with
    ``enable_trace=True``; ``record(..., trace=True)`` sections of the user's code go there
    too. When ``trigger`` fires, the events recorded since the last write are written to
    ``filename`` through the manager's writer, in Chrome's Trace Event Format: complete
    events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds) in a JSON array, which
    chrome://tracing and Perfetto open. With an appending tracer (the default) the array is
    left open during training, which both tools accept, and closed when training ends, so
    the finished file is plain JSON; :func:`~pytorch_pfn_extras.profiler.load_chrome_trace_as_json`
    reads both.

    The tracer's events not yet written are kept in snapshots; events written after the
    last snapshot are written again by a resumed run.

    In a job of several processes only global rank 0 writes the file, unless ``per_rank``;
    the tracer of the other ranks is flushed all the same (its events leave memory), into
    nothing.

    Args:
        trigger: When to write the events; each epoch by default.
        filename: Trace file under the output directory (``'chrome_trace.json'`` by default).
        enable: Trigger that turns recording on. As in PPE 0.9, the tracer records from the
            start (unless it was disabled before): the triggers only toggle it.
        disable: Trigger that turns recording off; never when ``None``.
        tracer: The tracer to write; the process-wide one by default (the one the manager
            and :func:`~pytorch_pfn_extras.profiler.record` use).
        per_rank: In a job of several processes (an initialized process group of more than
            one rank), every rank writes its own trace, named with its rank before the
            suffix (``chrome_trace.rank1.json`` for ``chrome_trace.json``). By default only
            global rank 0 writes it. The rank is read at the first write.
        **kwargs: ``writer``: a writer to use instead of the manager's.

    Raises:
        TypeError: An unknown keyword argument, or a tracer that is not a
            :class:`~pytorch_pfn_extras.profiler.Tracer`.

    Example:
        >>> manager = ExtensionsManager(..., enable_trace=True)
        >>> manager.extend(extensions.TimelineTrace(filename="trace.json"))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER

    def __init__(
        self,
        trigger: TriggerLike = (1, "epoch"),
        filename: str | None = None,
        enable: TriggerLike = None,
        disable: TriggerLike = None,
        tracer: Tracer | None = None,
        *,
        per_rank: bool = False,
        **kwargs: Any,
    ) -> None:
        check_keywords("TimelineTrace", kwargs, _KWARGS)
        if filename is None:
            filename = "chrome_trace.json"
        if not isinstance(filename, str) or not filename:
            message = f"TimelineTrace: filename must be a non-empty string, got {filename!r}"
            raise ValueError(message)
        if tracer is not None and not isinstance(tracer, Tracer):
            message = f"TimelineTrace: tracer must be a profiler Tracer, got {tracer!r}"
            raise TypeError(message)
        self._write_trigger = get_trigger(trigger)
        self._enable_trigger: Trigger | None = None if enable is None else get_trigger(enable)
        self._disable_trigger: Trigger | None = None if disable is None else get_trigger(disable)
        self._filename = filename
        self._files = RankFiles("TimelineTrace", per_rank)
        self._tracer = tracer
        self._writer: Writer | None = kwargs.get("writer")

    @property
    def tracer(self) -> Tracer:
        """The tracer whose events are written."""
        if self._tracer is None:
            self._tracer = get_tracer()
        return self._tracer

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Initialize an own writer (the tracer records as it is, from the start); the rank
        that writes the file is found again at the first write."""
        self._files.reset()
        if self._writer is not None:
            self._writer.initialize(manager.out)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Switch recording on or off, and write the events when the trigger fires."""
        if self._enable_trigger is not None and self._enable_trigger(manager):
            self.tracer.enable(True)
        if self._disable_trigger is not None and self._disable_trigger(manager):
            self.tracer.enable(False)
        if self._write_trigger(manager):
            self._flush(manager)

    def _flush(self, manager: ExtensionsManagerProtocol) -> tuple[str, Writer] | None:
        """Flush the tracer; return the file name and the writer it went to, if any."""
        writer = self._writer if self._writer is not None else manager.writer
        if writer is None:
            return None
        filename = self._files.name(self._filename)
        if filename is None:  # another rank writes the file
            filename, writer = self._filename, _Unwritten()
        self.tracer.flush(filename, writer)
        return filename, writer

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Write the remaining events and close the trace file's JSON array."""
        tracer = self.tracer
        target = self._flush(manager)
        if target is not None and isinstance(tracer, ChromeTracer):
            filename, writer = target
            state = tracer.state_dict()
            if state["started"]:
                writer(
                    filename,
                    writer.out_dir,
                    _closing_bytes(),
                    savefun=write_bytes,
                    append=True,
                )
                # The next flush of this tracer starts a new file.
                tracer.load_state_dict({**state, "started": False})
        if self._writer is not None:
            self._writer.finalize()

    def state_dict(self) -> dict[str, Any]:
        """Return the tracer's state and the states of the triggers."""
        state: dict[str, Any] = {
            "tracer": self.tracer.state_dict(),
            "trigger": self._write_trigger.state_dict(),
        }
        if self._enable_trigger is not None:
            state["enable"] = self._enable_trigger.state_dict()
        if self._disable_trigger is not None:
            state["disable"] = self._disable_trigger.state_dict()
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self.tracer.load_state_dict(to_load["tracer"])
        self._write_trigger.load_state_dict(to_load.get("trigger", {}))
        if self._enable_trigger is not None:
            self._enable_trigger.load_state_dict(to_load.get("enable", {}))
        if self._disable_trigger is not None:
            self._disable_trigger.load_state_dict(to_load.get("disable", {}))
