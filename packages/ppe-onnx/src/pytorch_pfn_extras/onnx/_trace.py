"""A small Chrome trace of the phases of an export (run, export, write)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any


class PhaseTrace:
    """Record named phases as Chrome trace "complete" events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            end = time.perf_counter_ns()
            self.events.append(
                {
                    "name": name,
                    "cat": "ppe-onnx",
                    "ph": "X",
                    "ts": start / 1000,
                    "dur": (end - start) / 1000,
                    "pid": os.getpid(),
                    "tid": threading.get_ident(),
                }
            )

    def write(self, path: str) -> None:
        """Write the trace as JSON, gzip-compressed when ``path`` ends with ``.gz``."""
        data = json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms"}).encode()
        if path.endswith(".gz"):
            data = gzip.compress(data)
        with open(path, "wb") as file:
            file.write(data)
