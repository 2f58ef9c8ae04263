"""The plot worker: one Python process that draws the plotting extensions' images.

Drawing a plot with matplotlib and encoding the PNG takes tens of milliseconds, which a plot
written at every epoch would take from training. The worker (``python _png_render.py``, which
imports matplotlib but never torch) draws them on another core while training goes on: an
extension sends a picklable spec, a reader thread of this process receives the PNG bytes, and
the extension writes them through its writer from the training thread at its next call (or at
``finalize``). The worker is started at the first plot and ends with the training process (its
input closes). If it cannot start, dies, or fails to draw an image, that image is drawn in the
training process instead (a drawing error is then raised there, as it would have been).
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import warnings
import weakref
from typing import Any, Protocol

from pytorch_pfn_extras.training.extensions import _png_render

# ``python -c``: the worker's sys.path starts without the extensions' directory, whose modules
# (``util``, ``slack``, ...) must not shadow installed ones.
_BOOT = "import runpy, sys; del sys.path[0]; runpy.run_path(sys.argv[1], run_name='__main__')"


class Drawing:
    """One image being drawn by the worker: :attr:`done` once :attr:`png` or :attr:`error`."""

    __slots__ = ("done", "error", "event", "png")

    def __init__(self) -> None:
        self.done = False
        self.png: bytes | None = None
        self.error: str | None = None
        self.event = threading.Event()

    def finish(self, png: bytes | None, error: str | None) -> None:
        self.png, self.error = png, error
        self.done = True
        self.event.set()

    def wait(self, timeout: float) -> bool:
        """Wait until done, at most ``timeout`` seconds; whether it is done."""
        return self.event.wait(timeout)


class PlotWorker:
    """The worker process and the thread reading its answers."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, _png_render.__file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._lock = threading.Lock()
        self._drawings: dict[int, Drawing] = {}
        self._next_job = 0
        self.alive = True
        self._reader = threading.Thread(target=self._read, name="ppe-plot-worker", daemon=True)
        self._reader.start()

    @property
    def process_id(self) -> int:
        """The worker process's pid."""
        return self._process.pid

    def draw(self, kind: str, owner: int, spec: dict[str, Any]) -> Drawing | None:
        """Send a drawing request; ``None`` if the worker is gone or the spec cannot be sent."""
        try:
            request = pickle.dumps(
                ("draw", self._next_job, kind, owner, spec), protocol=pickle.HIGHEST_PROTOCOL
            )
        except Exception:  # e.g. an rcParams value that does not pickle: draw in-process
            return None
        drawing = Drawing()
        with self._lock:
            if not self.alive:
                return None
            self._drawings[self._next_job] = drawing
            self._next_job += 1
            if not self._send(request):
                return None
        return drawing

    def drop(self, owner: int) -> None:
        """Forget the figure kept for ``owner``."""
        with self._lock:
            if self.alive:
                self._send(pickle.dumps(("drop", owner)))

    def _send(self, request: bytes) -> bool:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(request)
            stdin.flush()
        except (OSError, ValueError):
            self._gone()
            return False
        return True

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            try:
                job, ok, payload = pickle.load(stdout)
            except Exception:  # EOF (the worker ended) or a broken stream
                self._gone()
                return
            with self._lock:
                drawing = self._drawings.pop(job, None)
            if drawing is not None:
                drawing.finish(payload if ok else None, None if ok else payload)

    def _gone(self) -> None:
        """The worker cannot be used any more: every pending drawing ends without an image
        (drawn in the training process instead; :func:`get_worker` warns there)."""
        with self._lock:
            self.alive = False
            pending, self._drawings = self._drawings, {}
        for drawing in pending.values():
            drawing.finish(None, None)

    def close(self) -> None:
        """End the worker: close its input and wait for it (briefly)."""
        with self._lock:
            self.alive = False
            stdin = self._process.stdin
            if stdin is not None and not stdin.closed:
                try:
                    stdin.close()
                except OSError:
                    pass
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=5)  # it ends at the end of the worker's output
        if self._process.stdout is not None and not self._reader.is_alive():
            self._process.stdout.close()


class Flushable(Protocol):
    def flush(self) -> None: ...


_worker: PlotWorker | None = None
# Extensions with images not written yet: written at interpreter exit, before the worker ends.
pending_owners: weakref.WeakSet[Flushable] = weakref.WeakSet()
_failed = False
_warned = False
_closing = False
_start_lock = threading.Lock()


def get_worker() -> PlotWorker | None:
    """This process's plot worker, started at the first call; ``None`` if it is unavailable
    (it could not start, or it died: a warning says so, once)."""
    global _worker, _failed, _warned
    worker = _worker
    if worker is not None and worker.alive and worker.pid == os.getpid():
        return worker
    with _start_lock:
        if _failed or _closing:
            return None
        if _worker is not None and _worker.pid == os.getpid():
            if not _warned:
                _warned = True
                warnings.warn(
                    f"the plot worker (pid {_worker.process_id}) exited; plots are drawn in "
                    "the training process from now on",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return None
        try:
            _worker = PlotWorker()
        except OSError as error:
            _failed = True
            warnings.warn(
                f"the plot worker could not start ({error}); plots are drawn in the training "
                "process",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        return _worker


def forget(owner: int) -> None:
    """Have the worker forget the figure it keeps for ``owner`` (an extension gone)."""
    worker = _worker
    if worker is not None and worker.alive and worker.pid == os.getpid():
        worker.drop(owner)


def _shutdown() -> None:
    global _closing
    for owner in list(pending_owners):
        try:
            owner.flush()
        except Exception as error:  # exiting: report, and let the other images be written
            warnings.warn(f"a plot could not be written at exit: {error!r}", RuntimeWarning, 2)
    _closing = True
    worker = _worker
    if worker is not None and worker.pid == os.getpid():
        worker.close()


atexit.register(_shutdown)
