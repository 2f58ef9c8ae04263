"""ChromeTracer: timelines in the Chrome trace format (chrome://tracing, Perfetto).

Events recorded in another process than the one that created the tracer (DataLoader workers,
whether forked or spawned) go back to it through a :class:`~._spool.Spool`; the creating
process reads them when it flushes, lists or saves its events.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

from pytorch_pfn_extras.profiler._spool import Spool, current_pid
from pytorch_pfn_extras.profiler._tracer import Tracer, WriterLike

_NO_EVENT: contextlib.nullcontext[None] = contextlib.nullcontext()


def _write_bytes(target: bytes, fileobj: IO[Any]) -> None:
    """``savefun`` of the tracer's writes: write pre-serialized bytes."""
    try:
        fileobj.write(target)
    except TypeError:  # a text-mode file
        fileobj.write(target.decode("utf-8"))


def _closing_bytes() -> bytes:
    # The events written before each end with a comma: a metadata event naming the process
    # ends the array, so the file becomes a complete JSON document.
    event = {"name": "process_name", "ph": "M", "pid": current_pid(), "tid": 0}
    event["args"] = {"name": "pytorch-pfn-extras"}
    return (json.dumps(event) + "\n]\n").encode("utf-8")


class _ChromeEvent:
    """Context manager of one :meth:`ChromeTracer.add_event`; its value is the event dict."""

    __slots__ = ("_discarded", "_event", "_start", "_tracer")

    def __init__(self, tracer: ChromeTracer, name: str) -> None:
        self._tracer = tracer
        self._event: dict[str, Any] = {"name": name, "ph": "X"}
        self._start = 0
        self._discarded = False

    def __enter__(self) -> dict[str, Any]:
        event = self._event
        event["ts"] = time.time_ns() / 1000.0
        event["dur"] = 0.0
        event["pid"] = current_pid()
        event["tid"] = threading.get_native_id()
        self._start = time.perf_counter_ns()
        return event

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._discarded:
            return
        self._event["dur"] = (time.perf_counter_ns() - self._start) / 1000.0
        self._tracer._add(self._event)

    def discard(self) -> None:
        """Do not record the event when the block exits."""
        self._discarded = True


class ChromeTracer(Tracer):
    """Tracer that produces Chrome trace events (open the file in Perfetto or chrome://tracing).

    Each event is a complete event ``{"name", "ph": "X", "ts", "dur", "pid", "tid"}`` (times in
    microseconds, ``ts`` since the epoch so that processes share a clock); the dict that
    :meth:`add_event` gives may be annotated, e.g. with ``"args"``. Events recorded in other
    processes (e.g. DataLoader workers, which receive a copy of the tracer) come back to the
    process that created it.

    Args:
        max_event_count: Keep at most this many events in memory; later ones are dropped (with
            a warning, once). ``None``: no limit. With ``append=True``, flushed events leave
            memory.
        enable: Record events from the start; see :meth:`enable`.
        append: :meth:`flush` appends the events recorded since the previous flush to the file,
            left as an unterminated JSON array (which trace viewers and
            :func:`load_chrome_trace_as_json` accept) until :meth:`finalize` closes it;
            otherwise it rewrites the file with every event as a complete JSON array.

    Example:
        >>> tracer = ChromeTracer()
        >>> writer = writing.SimpleWriter(out_dir="result")
        >>> tracer.initialize_writer("trace.json", writer)
        >>> with tracer.add_event("load") as event:
        ...     event["args"] = {"path": path}
        ...     image = load(path)
        >>> tracer.flush("trace.json", writer)  # at the end of each epoch
        >>> tracer.finalize()  # at the end of training: trace.json is complete JSON
    """

    def __init__(
        self, max_event_count: int | None = None, enable: bool = True, append: bool = True
    ) -> None:
        if max_event_count is not None and (
            type(max_event_count) is not int or max_event_count < 0
        ):
            message = f"max_event_count must be None or a non-negative int, got {max_event_count!r}"
            raise ValueError(message)
        self._max_event_count = max_event_count
        self._enabled = enable
        self._append = append
        self._spool = Spool("ppe-chrome-trace")
        self._setup_local_state()

    def _setup_local_state(self) -> None:
        # A deque: append and popleft are atomic, so flushing never loses a concurrent event.
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._dropped_warned = False
        self._started = False  # the trace file's opening "[" is written (append=True)
        self._target: tuple[str, WriterLike] | None = None  # where finalize() writes

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to a worker process only needs to know where to send its events.
        return {
            "max_event_count": self._max_event_count,
            "enabled": self._enabled,
            "append": self._append,
            "spool": self._spool,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._max_event_count = state["max_event_count"]
        self._enabled = state["enabled"]
        self._append = state["append"]
        self._spool = state["spool"]
        self._setup_local_state()

    @property
    def enabled(self) -> bool:
        """Whether events are being recorded."""
        return self._enabled

    def enable(self, enable_flag: bool) -> None:
        """Start (``True``) or stop (``False``) recording events."""
        self._enabled = bool(enable_flag)

    def add_event(self, name: str) -> contextlib.AbstractContextManager[dict[str, Any] | None]:
        """Return a context manager that records its block as an event called ``name``.

        Its value is the event dict (``None`` while the tracer is disabled); keys added to it
        inside the block, such as ``"args"``, are recorded too.

        Example:
            >>> with tracer.add_event("load") as event:
            ...     if event is not None:
            ...         event["args"] = {"index": i}
        """
        if not self._enabled:
            return _NO_EVENT
        return _ChromeEvent(self, name)

    def add_remote_event(self, name: str, event: Any) -> None:
        """Add an event measured elsewhere, e.g. on another machine.

        Args:
            name: Name of the event (replaces the ``"name"`` of ``event``).
            event: The Chrome trace event, a mapping such as ``{"ph": "X", "ts": ..., "dur":
                ..., "pid": ..., "tid": ...}``.

        Raises:
            TypeError: ``event`` is not a mapping.
        """
        if not isinstance(event, Mapping):
            message = f"a Chrome trace event must be a mapping, got {type(event).__name__}"
            raise TypeError(message)
        if self._enabled:
            self._add({**event, "name": name})

    def _add(self, event: dict[str, Any]) -> None:
        if self._spool.is_owner():
            self._keep(event)
        else:
            self._spool.send(event)

    def _keep(self, event: dict[str, Any]) -> None:
        # No lock (a forked worker could inherit it held): concurrent threads may overshoot the
        # limit by one event each at most.
        limit = self._max_event_count
        if limit is not None and len(self._events) >= limit:
            if not self._dropped_warned:
                self._dropped_warned = True
                message = f"ChromeTracer reached max_event_count={limit}; later events are dropped"
                warnings.warn(message, RuntimeWarning, stacklevel=4)
            return
        self._events.append(event)

    def _collect_remote(self) -> None:
        for event in self._spool.collect():
            self._keep(event)

    def get_events(self) -> list[dict[str, Any]]:
        """Return the events kept in memory, including those sent by worker processes."""
        self._collect_remote()
        return list(self._events)

    def clear(self) -> None:
        """Discard the recorded events, including those already sent by worker processes."""
        self._collect_remote()
        self._events.clear()
        self._dropped_warned = False

    def serialize(self) -> bytes:
        """Return what the next :meth:`flush` writes, and forget the events it contains.

        With ``append=True``: the events recorded since the previous flush, each followed by a
        comma (the first flush also writes the opening ``[``). Otherwise: every event, as a
        complete JSON array.
        """
        self._collect_remote()
        events = self._events
        if not self._append:
            return json.dumps(list(events), default=repr).encode("utf-8")
        popleft = events.popleft
        taken = [popleft() for _ in range(len(events))]
        chunk = "".join(json.dumps(event, default=repr) + ",\n" for event in taken)
        if not self._started:
            chunk = "[\n" + chunk
            self._started = True
        self._dropped_warned = False
        return chunk.encode("utf-8")

    def initialize_writer(self, filename: str, writer: WriterLike) -> None:
        """Start the trace file ``filename`` in ``writer.out_dir`` (an empty array, with
        ``append=True``); :meth:`finalize` completes it.

        Args:
            filename: Name of the trace file, relative to the writer's ``out_dir``.
            writer: A ``pytorch_pfn_extras.writing`` writer (e.g. ``SimpleWriter``).
        """
        self._target = (filename, writer)
        if self._append:
            writer(filename, writer.out_dir, b"[\n", savefun=_write_bytes, append=False)
            self._started = True

    def flush(self, filename: str, writer: WriterLike) -> None:
        """Write the events to ``filename`` in ``writer.out_dir``.

        Args:
            filename: Name of the trace file, relative to the writer's ``out_dir``.
            writer: A ``pytorch_pfn_extras.writing`` writer (e.g. ``SimpleWriter``).
        """
        self._target = (filename, writer)
        appending = self._append and self._started
        data = self.serialize()
        writer(filename, writer.out_dir, data, savefun=_write_bytes, append=appending)

    def finalize(self) -> None:
        """Flush the remaining events and close the trace file of the last :meth:`flush` or
        :meth:`initialize_writer`, making it a complete JSON array.

        The next flush starts the file anew. In a worker process it closes the file through
        which events go back to the main process.
        """
        if not self._spool.is_owner():
            self._spool.close()
            return
        if self._target is None:
            return
        filename, writer = self._target
        self.flush(filename, writer)
        if self._append:
            writer(filename, writer.out_dir, _closing_bytes(), savefun=_write_bytes, append=True)
            self._started = False

    def state_dict(self) -> dict[str, Any]:
        """Return the events kept in memory and whether the trace file was started."""
        self._collect_remote()
        return {"events": list(self._events), "enabled": self._enabled, "started": self._started}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`.

        Raises:
            KeyError: ``to_load`` lacks ``"events"``.
        """
        if "events" not in to_load:
            message = f"ChromeTracer state lacks 'events'; got the keys {sorted(to_load)}"
            raise KeyError(message)
        self._events = collections.deque(dict(event) for event in to_load["events"])
        self._enabled = bool(to_load.get("enabled", self._enabled))
        self._started = bool(to_load.get("started", False))


def load_chrome_trace_as_json(filename: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a Chrome trace file, complete or appended to (an unterminated JSON array).

    Args:
        filename: Path of the trace file.

    Returns:
        The list of events (the ``traceEvents`` of the JSON object format too).

    Raises:
        ValueError: the file is not a Chrome trace.
    """
    with open(filename, encoding="utf-8") as f:
        text = f.read().strip()
    if text.startswith("[") and not text.endswith("]"):
        text = text.rstrip().rstrip(",") + "]"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        message = f"{os.fspath(filename)!r} is not a Chrome trace file: {error}"
        raise ValueError(message) from error
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        data = data["traceEvents"]
    if not isinstance(data, list) or not all(isinstance(event, dict) for event in data):
        message = (
            f"{os.fspath(filename)!r} is not a Chrome trace file: expected a JSON array of events"
        )
        raise ValueError(message)
    return data
