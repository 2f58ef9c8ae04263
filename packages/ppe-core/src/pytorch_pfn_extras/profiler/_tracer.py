"""Tracers: timelines of events, and the Chrome trace format (chrome://tracing, Perfetto).

Events recorded in another process than the one that created the tracer (DataLoader workers,
whether forked or spawned) are appended to a per-process JSON-lines file in a spool directory
named by the tracer; the creating process reads them back when it flushes or saves its state.
"""

from __future__ import annotations

import abc
import collections
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol


class WriterLike(Protocol):
    """What :meth:`Tracer.flush` needs from a ``pytorch_pfn_extras.writing`` writer."""

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


class Tracer(abc.ABC):
    """Records a timeline of named events.

    :func:`pytorch_pfn_extras.profiler.record` calls :meth:`initialize_event` when a traced
    section starts and :meth:`finalize_event` with its result when it ends.
    """

    @abc.abstractmethod
    def initialize_event(self, name: str, **kwargs: Any) -> Any:
        """Start an event called ``name``; ``kwargs`` are attached to it.

        Returns:
            An opaque handle for :meth:`finalize_event` (``None`` when not recording).
        """

    @abc.abstractmethod
    def finalize_event(self, event: Any) -> None:
        """End the event started by :meth:`initialize_event` and record it."""

    @abc.abstractmethod
    def enable(self, enable: bool) -> None:
        """Start (``True``) or stop (``False``) recording events."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Discard the recorded events."""

    @abc.abstractmethod
    def flush(self, filename: str, writer: WriterLike) -> None:
        """Write the recorded events to ``filename`` in ``writer.out_dir`` with ``writer``."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Return the tracer's state (events included), for snapshots."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""


def _write_bytes(target: bytes, fileobj: IO[Any]) -> None:
    """``savefun`` of :meth:`ChromeTracer.flush`: write pre-serialized bytes."""
    try:
        fileobj.write(target)
    except TypeError:  # a text-mode file
        fileobj.write(target.decode("utf-8"))


def _remove_spool(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)


class ChromeTracer(Tracer):
    """Tracer that produces Chrome trace events (open the file in Perfetto or chrome://tracing).

    Each event is a complete event ``{"name", "ph": "X", "ts", "dur", "pid", "tid"}`` (times in
    microseconds, ``ts`` since the epoch so that processes share a clock), plus ``"args"`` when
    keyword arguments were given. Events recorded in other processes (e.g. DataLoader workers,
    which receive a copy of the tracer) come back to the process that created it.

    Args:
        max_event_count: Keep at most this many events in memory; later ones are dropped (with
            a warning, once). ``None``: no limit. With ``append=True``, flushed events leave
            memory.
        enable: Record events from the start; see :meth:`enable`.
        append: :meth:`flush` appends the events recorded since the previous flush to the file,
            left as an unterminated JSON array (which trace viewers and
            :func:`load_chrome_trace_as_json` accept); otherwise it rewrites the file with every
            event as a complete JSON array.

    Example:
        >>> tracer = ChromeTracer()
        >>> event = tracer.initialize_event("load")
        >>> tracer.finalize_event(event)
        >>> tracer.flush("trace.json", writing.SimpleWriter(out_dir="result"))
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
        self._owner_pid = os.getpid()
        name = f"ppe-chrome-trace-{self._owner_pid}-{uuid.uuid4().hex}"
        self._spool_dir = os.path.join(tempfile.gettempdir(), name)
        self._setup_local_state()
        weakref.finalize(self, _remove_spool, self._spool_dir, self._owner_pid)

    def _setup_local_state(self) -> None:
        # A deque: append and popleft are atomic, so flushing never loses a concurrent event.
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._collect_lock = threading.Lock()
        self._dropped_warned = False
        self._started = False  # the first flush (with append=True) has written the header
        self._spool_offsets: dict[str, int] = {}
        self._spool_file: IO[str] | None = None
        self._spool_pid = -1

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to a worker process only needs to know where to send its events.
        return {
            "max_event_count": self._max_event_count,
            "enabled": self._enabled,
            "append": self._append,
            "owner_pid": self._owner_pid,
            "spool_dir": self._spool_dir,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._max_event_count = state["max_event_count"]
        self._enabled = state["enabled"]
        self._append = state["append"]
        self._owner_pid = state["owner_pid"]
        self._spool_dir = state["spool_dir"]
        self._setup_local_state()

    @property
    def enabled(self) -> bool:
        """Whether events are being recorded."""
        return self._enabled

    def enable(self, enable: bool) -> None:
        """Start (``True``) or stop (``False``) recording events."""
        self._enabled = bool(enable)

    def initialize_event(self, name: str, **kwargs: Any) -> Any:
        """Start an event called ``name``; ``kwargs`` (JSON-serializable) become its ``args``."""
        if not self._enabled:
            return None
        return (name, time.time_ns(), time.perf_counter_ns(), kwargs)

    def finalize_event(self, event: Any) -> None:
        """End an event started by :meth:`initialize_event` and record it."""
        if event is None:
            return
        end = time.perf_counter_ns()
        name, start_wall, start, kwargs = event
        record: dict[str, Any] = {
            "name": name,
            "ph": "X",
            "ts": start_wall / 1000.0,
            "dur": (end - start) / 1000.0,
            "pid": os.getpid(),
            "tid": threading.get_native_id(),
        }
        if kwargs:
            record["args"] = kwargs
        if record["pid"] == self._owner_pid:
            self._keep(record)
        else:
            self._send_to_owner(record)

    def _keep(self, record: dict[str, Any]) -> None:
        # No lock (a forked worker could inherit it held): concurrent threads may overshoot the
        # limit by one event each at most.
        limit = self._max_event_count
        if limit is not None and len(self._events) >= limit:
            if not self._dropped_warned:
                self._dropped_warned = True
                message = f"ChromeTracer reached max_event_count={limit}; later events are dropped"
                warnings.warn(message, RuntimeWarning, stacklevel=4)
            return
        self._events.append(record)

    def _send_to_owner(self, record: dict[str, Any]) -> None:
        # One line-buffered O_APPEND write per event: lines of concurrent threads never mix, and
        # no lock is held that a fork could inherit.
        line = json.dumps(record, default=repr) + "\n"
        pid = record["pid"]
        spool = self._spool_file
        if spool is None or self._spool_pid != pid:
            os.makedirs(self._spool_dir, exist_ok=True)
            path = os.path.join(self._spool_dir, f"{pid}.jsonl")
            spool = self._spool_file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            self._spool_pid = pid
        spool.write(line)

    def _collect_remote(self) -> None:
        """Move the complete events written by other processes into this process's list."""
        if os.getpid() != self._owner_pid or not os.path.isdir(self._spool_dir):
            return
        with self._collect_lock:
            self._collect_remote_locked()

    def _collect_remote_locked(self) -> None:
        for entry in sorted(os.listdir(self._spool_dir)):
            path = os.path.join(self._spool_dir, entry)
            offset = self._spool_offsets.get(entry, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # a worker may be writing the last line right now
            for line in data[:end].splitlines():
                if line:
                    self._keep(json.loads(line))
            self._spool_offsets[entry] = offset + end

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

    def flush(self, filename: str, writer: WriterLike) -> None:
        """Write the events to ``filename`` in ``writer.out_dir``.

        Args:
            filename: Name of the trace file, relative to the writer's ``out_dir``.
            writer: A ``pytorch_pfn_extras.writing`` writer (e.g. ``SimpleWriter``).
        """
        appending = self._append and self._started
        data = self.serialize()
        writer(filename, writer.out_dir, data, savefun=_write_bytes, append=appending)

    def state_dict(self) -> dict[str, Any]:
        """Return the events kept in memory and whether the trace file was started."""
        self._collect_remote()
        return {"events": list(self._events), "enabled": self._enabled, "started": self._started}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`.

        Raises:
            KeyError: ``state`` lacks ``"events"``.
        """
        if "events" not in state:
            message = f"ChromeTracer state lacks 'events'; got the keys {sorted(state)}"
            raise KeyError(message)
        self._events = collections.deque(dict(event) for event in state["events"])
        self._enabled = bool(state.get("enabled", self._enabled))
        self._started = bool(state.get("started", False))


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
