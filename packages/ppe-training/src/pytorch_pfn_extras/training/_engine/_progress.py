"""The one progress display redrawn in place (PPE's ``extensions.util.ProgressBar``), and the
bar drawn in it: the evaluators' progress line and the ProgressBar extension draw with it."""

from __future__ import annotations

import collections
import sys
import time
from typing import IO, Any, NamedTuple

__all__ = ["ProgressBar", "Timing", "bar"]

_N_TIMINGS = 10  # the speed is measured over the last calls


class Timing(NamedTuple):
    iteration: int
    epoch_detail: float
    time: float  # time.perf_counter()


class ProgressBar:
    """A progress display redrawn in place on a terminal; subclasses give its lines.

    :meth:`update` clears the lines drawn before, prints :meth:`get_lines` and moves the
    cursor back up, so the next update overwrites them; :meth:`close` clears them for
    good. On a stream that is not a terminal (a file, a pipe) each update is printed
    below the previous one, without control characters. The
    :class:`~pytorch_pfn_extras.training.extensions.ProgressBar` extension and the progress
    line of both evaluators (``progress_bar=True``) are drawn by it.

    Args:
        out: Stream to print to; standard output (looked up at each print) by default.

    Example:
        >>> class Counter(ProgressBar):
        ...     def __init__(self) -> None:
        ...         super().__init__()
        ...         self.count = 0
        ...
        ...     def get_lines(self) -> list[str]:
        ...         return [f"{self.count} items"]
        >>> bar = Counter()
        >>> bar.count += 1
        >>> bar.update()
        >>> bar.close()
    """

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out
        self._timings: collections.deque[Timing] = collections.deque(maxlen=_N_TIMINGS)

    @property
    def out(self) -> IO[str]:
        """The stream it prints to."""
        return self._out if self._out is not None else sys.stdout

    def _is_terminal(self) -> bool:
        isatty = getattr(self.out, "isatty", None)
        return callable(isatty) and bool(isatty())

    def update_speed(self, iteration: int, epoch_detail: float) -> tuple[float, float]:
        """Record the progress now; return the speed over the last calls.

        Args:
            iteration: Iterations done so far.
            epoch_detail: Epochs done so far, with the fraction of the current one.

        Returns:
            ``(iterations per second, epochs per second)`` since the oldest of the last 10
            calls; infinite when no time has passed since then (the first call).
        """
        old, now = self._record(iteration, epoch_detail)
        span = now.time - old.time
        if span <= 0:
            return float("inf"), float("inf")
        return (iteration - old.iteration) / span, (epoch_detail - old.epoch_detail) / span

    def _record(self, iteration: int, epoch_detail: float) -> tuple[Timing, Timing]:
        """Record the progress now; return the oldest of the last 10 records, and this one."""
        now = Timing(iteration, epoch_detail, time.perf_counter())
        self._timings.append(now)
        return self._timings[0], now

    def get_lines(self) -> list[str]:
        """Return the lines to draw (a trailing newline is added where missing).

        Raises:
            NotImplementedError: Always; subclasses implement it.
        """
        message = f"{type(self).__name__} must implement get_lines() to be drawn"
        raise NotImplementedError(message)

    def update(self, manager: Any = None) -> None:
        """Draw the lines of :meth:`get_lines` over the previous ones.

        Args:
            manager: Ignored here; for subclasses that read the manager's progress before
                drawing.
        """
        self._draw(final=False)

    def _draw(self, *, final: bool) -> bool:
        """Draw :meth:`get_lines` over the previous lines; a ``final`` drawing stays.

        Returns:
            Whether the lines were drawn in place, to be drawn over (on a terminal, unless
            ``final``).
        """
        lines = [line if line.endswith("\n") else line + "\n" for line in self.get_lines()]
        terminal = self._is_terminal()
        if terminal:
            self.erase_console()
        self.out.write("".join(lines))
        in_place = terminal and not final
        if in_place:
            self.move_cursor_up(len(lines))
        self.flush()
        return in_place

    def close(self) -> None:
        """Clear the lines drawn on a terminal."""
        if self._is_terminal():
            self.erase_console()
        self.flush()

    def erase_console(self) -> None:
        """Clear the console from the cursor to the end of the screen."""
        self.out.write("\x1b[J")

    def move_cursor_up(self, n: int) -> None:
        """Move the cursor ``n`` lines up, in its column (the first after :meth:`update`)."""
        if n > 0:
            self.out.write(f"\x1b[{n:d}A")

    def flush(self) -> None:
        """Flush the stream."""
        flush = getattr(self.out, "flush", None)
        if callable(flush):
            flush()


def bar(fraction: float, length: int) -> str:
    """A bar of ``length`` characters, ``#`` for the done ``fraction`` (clamped to 0..1)."""
    done = int(length * min(max(fraction, 0.0), 1.0))
    return "#" * done + "." * (length - done)
