"""Synchronisation of a comparer's engines: the random-state reset and the lock-step."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn, TypeAlias

import numpy as np
import torch

from pytorch_pfn_extras.utils._comparer_values import Values

# Engine name -> values it recorded at a step (in the order the engines are compared).
Arrivals: TypeAlias = dict[str, tuple[int, Values]]


class _RandomState(NamedTuple):
    """The global random states, reset before each group of engines starts."""

    python: Any
    numpy: Any
    torch: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def capture(cls) -> _RandomState:
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda = torch.cuda.get_rng_state_all()
        return cls(random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


class _Aborted(BaseException):
    """Stops an engine because another one failed (a BaseException: ``except Exception``
    in user code does not swallow it)."""


class _LockStep:
    """Engines running at once: each recorded step waits until all of them recorded it.

    The last engine to arrive calls ``settle(arrivals)`` (which compares them) while the
    others wait. The first error (an engine's own, or a divergence) is kept in
    :attr:`failure`; every engine still running is then stopped with :class:`_Aborted` at
    its next recorded step, or at once if it is waiting.
    """

    def __init__(self, names: Sequence[str], settle: Callable[[Arrivals], None]) -> None:
        self._cond = threading.Condition()
        self._settle = settle
        self._order = list(names)
        self._running = set(names)
        self._arrived: Arrivals = {}
        self._round = 0
        self.totals: dict[str, int] = {}
        self.failure: BaseException | None = None

    def arrive(self, name: str, step: int, values: Values) -> None:
        with self._cond:
            if self.failure is not None:
                raise _Aborted
            self._arrived[name] = (step, values)
            if self.totals:  # an engine has finished: this step has nothing to compare with
                self._fail(self._unmatched())
            if self._arrived.keys() == self._running:
                arrived = {n: self._arrived[n] for n in self._order if n in self._arrived}
                self._arrived = {}
                try:
                    self._settle(arrived)
                except BaseException as error:
                    self._fail(error)
                finally:
                    self._round += 1
                    self._cond.notify_all()
                return
            current = self._round
            self._cond.wait_for(lambda: self._round != current or self.failure is not None)
            if self.failure is not None:
                raise _Aborted

    def leave(self, name: str, total: int, error: BaseException | None) -> None:
        """Called when an engine's run ends, with its number of steps and its error."""
        with self._cond:
            self._running.discard(name)
            self.totals[name] = total
            if self.failure is None:
                if error is not None and not isinstance(error, _Aborted):
                    self.failure = error
                elif self._arrived:
                    self.failure = self._unmatched()
            self._cond.notify_all()

    def abort(self, error: BaseException) -> None:
        with self._cond:
            if self.failure is None:
                self.failure = error
            self._cond.notify_all()

    def _fail(self, error: BaseException) -> NoReturn:
        if self.failure is None:
            self.failure = error
        self._cond.notify_all()
        raise error

    def _unmatched(self) -> AssertionError:
        finished = ", ".join(f"{n!r} after {total}" for n, total in self.totals.items())
        going = ", ".join(f"{n!r} to iteration {step}" for n, (step, _) in self._arrived.items())
        message = (
            f"the engines ran different numbers of iterations: {finished} finished, {going} went on"
        )
        return AssertionError(message)
