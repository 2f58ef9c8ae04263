"""The signals that mean "stop", as the PreemptionHandler catches them.

The first one only sets a flag. A repeat (Slurm signals every process of a job step and
torchrun forwards its own copy, so each worker gets SIGTERM twice) only adds to a count,
unless a policy gives it to the handler that was there before: a second SIGINT (Ctrl-C
twice), or one that comes ``escalate_after`` seconds or more after the first signal.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import types
import weakref
from collections.abc import Iterable
from typing import Any

from pytorch_pfn_extras.training._preemption import logger


class Signals:
    """The handlers of ``signals`` in this process, and what they received.

    Args:
        signals: The signal numbers (checked by :func:`check_signals`).
        escalate_after: Seconds after the first signal from which a repeat goes to the
            previous handler (``None``: never).

    Attributes:
        received: The signal received first (``None`` if none).
        repeats: How many signals came after it and were absorbed.
        last_repeat: The last of them.
    """

    def __init__(self, signals: tuple[int, ...], escalate_after: float | None) -> None:
        self.signals = signals
        self.escalate_after = escalate_after
        self.received: int | None = None
        self.repeats = 0
        self.last_repeat: int | None = None
        self._received_at = 0.0  # time.monotonic() of the first signal
        self._interrupts = 0  # SIGINTs received
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}

    def notify(self, signum: int) -> None:
        """Record ``signum`` as received, if nothing was (what a signal does, without one)."""
        if self.received is None:
            self._received_at = time.monotonic()
            self.received = int(signum)

    def _on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        if os.getpid() != self._pid:
            return  # a forked child (DataLoader worker): its parent handles the signal
        now = time.monotonic()
        if signum == signal.SIGINT:
            self._interrupts += 1
        if self.received is None:
            self._received_at = now
            self.received = signum
            return
        # A repeat: absorbed, unless a policy gives it to whoever handled it before.
        interrupt = signum == signal.SIGINT and self._interrupts >= 2  # Ctrl-C twice
        late = self.escalate_after is not None and now - self._received_at >= self.escalate_after
        if not (interrupt or late):
            self.repeats += 1
            self.last_repeat = signum
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def install(self) -> None:
        """Handle the signals here (in the main thread only: elsewhere, a warning)."""
        if threading.current_thread() is not threading.main_thread():
            message = (
                "PreemptionHandler: training does not run in the main thread, where Python "
                "handles signals; signals are not caught (call notify() to stop the run)"
            )
            logger.warning(message)
            return
        for signum in self.signals:
            previous = signal.signal(signum, self._on_signal)
            self._previous[signum] = signal.SIG_DFL if previous is None else previous

    def restore(self) -> None:
        """Give the signals back to the handlers that were there before."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def keep_until_exit(self) -> None:
        """Leave the handlers installed (repeats keep coming after a stop: torchrun's copy,
        Slurm's SIGTERM after a requeue) and ignore the signals once the interpreter exits,
        when Python no longer runs handlers and would restore the default action."""
        if self._previous:
            atexit.register(_ignore_at_exit, weakref.WeakMethod(self._on_signal), self.signals)


def _ignore_at_exit(handler: weakref.WeakMethod[Any], signals: tuple[int, ...]) -> None:
    """At the interpreter's exit, ignore ``signals`` where ``handler`` still handles them."""
    installed = handler()
    if installed is None:
        return
    for signum in signals:
        if signal.getsignal(signum) == installed:
            signal.signal(signum, signal.SIG_IGN)


def signal_name(signum: int) -> str:
    """``"SIGTERM"`` for 15."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def check_signals(signals: Iterable[int]) -> tuple[int, ...]:
    """The signal numbers of ``signals`` (one number is accepted too), once each.

    Raises:
        TypeError: ``signals`` is not iterable.
        ValueError: It is empty, or holds something that is not a signal that can be caught.
    """
    if isinstance(signals, int):
        signals = (signals,)
    try:
        chosen = tuple(signals)
    except TypeError:
        message = f"signals must be signal numbers (e.g. signal.SIGTERM), got {signals!r}"
        raise TypeError(message) from None
    if not chosen:
        message = "signals must name at least one signal (e.g. signal.SIGTERM)"
        raise ValueError(message)
    valid = signal.valid_signals()
    for signum in chosen:
        if isinstance(signum, bool) or not isinstance(signum, int) or signum not in valid:
            message = f"signals must be signal numbers (e.g. signal.SIGTERM), got {signum!r}"
            raise ValueError(message)
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            message = f"{signal_name(signum)} cannot be caught; choose e.g. signal.SIGTERM"
            raise ValueError(message)
    return tuple(dict.fromkeys(int(s) for s in chosen))
