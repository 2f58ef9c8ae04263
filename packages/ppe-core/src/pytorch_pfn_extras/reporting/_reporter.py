"""The Reporter, its thread-local stack of current reporters, and the module-level helpers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeAlias

import numpy as np
import torch

Scalar: TypeAlias = torch.Tensor | np.ndarray[Any, Any] | np.floating[Any] | float
"""A value that can be summarized: a number, a 0-d tensor or a 0-d array."""

Value: TypeAlias = Scalar | Callable[[], float]
"""A reported value: a scalar, or a zero-argument callable evaluated when summarized."""

Observation: TypeAlias = dict[str, Any]
"""A mapping from value names to reported values."""

_Tensor = torch.Tensor


class _Local(threading.local):
    def __init__(self) -> None:
        self.reporters: list[Reporter] = []


_local = _Local()


class Reporter:
    """Object to which observed values are reported.

    The reporter holds a mapping from value names to observed values, its
    :attr:`observation`. A value can be reported with an *observer*, an object registered
    beforehand with :meth:`add_observer`; its name then prefixes the value name
    (``"<observer-name>/<key>"``). Tensors are stored detached, so reporting a loss keeps no
    autograd graph alive, and they are not converted to Python numbers.

    ``with reporter:`` makes the reporter *current* in this thread, so that the module-level
    :func:`report` reaches it; :meth:`scope` also swaps in a fresh observation dict.

    Example:
        >>> reporter = Reporter()
        >>> observer = object()
        >>> reporter.add_observer("my_observer", observer)
        >>> observation = {}
        >>> with reporter.scope(observation):
        ...     reporter.report({"x": 1}, observer)
        >>> observation
        {'my_observer/x': 1}
    """

    def __init__(self) -> None:
        self.observation: Observation = {}
        """Dictionary of observed values."""
        # id(observer) -> (prefix, observer); the reference keeps the id from being reused.
        self._observers: dict[int, tuple[str, object]] = {}

    def __enter__(self) -> Reporter:
        """Make this reporter current (push it on this thread's stack of reporters)."""
        _local.reporters.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Pop this reporter from this thread's stack of reporters."""
        _local.reporters.pop()

    @contextlib.contextmanager
    def scope(self, observation: Observation) -> Iterator[None]:
        """Report to ``observation`` inside the block, with this reporter current.

        Args:
            observation: The dict that receives the values reported inside the block. The
                previous observation dict is restored on exit.

        Example:
            >>> reporter = Reporter()
            >>> observation = {}
            >>> with reporter.scope(observation):
            ...     report({"loss": 0.5})
            >>> observation
            {'loss': 0.5}
        """
        old = self.observation
        self.observation = observation
        self.__enter__()
        try:
            yield
        finally:
            self.__exit__(None, None, None)
            self.observation = old

    def add_observer(self, name: str, observer: object) -> None:
        """Register an observer of values.

        Args:
            name: The prefix of the names of the values reported with ``observer``.
            observer: Any object (usually an ``nn.Module``); it is identified by identity.
        """
        self._observers[id(observer)] = (name + "/", observer)

    def add_observers(self, prefix: str, observers: Iterable[tuple[str, object]]) -> None:
        """Register several observers at once.

        Args:
            prefix: Prepended to every name.
            observers: ``(name, observer)`` pairs, e.g. ``module.named_modules()``.
        """
        for name, observer in observers:
            self.add_observer(prefix + name, observer)

    def report(self, values: Mapping[str, Any], observer: object = None) -> None:
        """Report observed values into :attr:`observation`.

        Args:
            values: Maps names to values: numbers, tensors (any device), arrays, or
                zero-argument callables.
            observer: A registered observer whose name prefixes the value names
                (``"<observer-name>/<key>"``); ``None`` keeps the names as given.

        Raises:
            KeyError: ``observer`` was not registered with :meth:`add_observer`.
        """
        if observer is None:
            prefix = ""
        else:
            entry = self._observers.get(id(observer))
            if entry is None:
                message = (
                    f"observer {type(observer).__name__} at {id(observer):#x} is not registered "
                    "to this reporter; call reporter.add_observer(name, observer) first"
                )
                raise KeyError(message)
            prefix = entry[0]
        observation = self.observation
        for key, value in values.items():
            if isinstance(value, _Tensor) and value.requires_grad:
                value = value.detach()
            observation[prefix + key] = value


def get_current_reporter() -> Reporter:
    """Return the current reporter of this thread (the innermost ``with reporter:``).

    Raises:
        RuntimeError: no reporter is current in this thread.
    """
    reporters = _local.reporters
    if not reporters:
        message = "no reporter is current in this thread; enter one with `with reporter:`"
        raise RuntimeError(message)
    return reporters[-1]


def report(values: Mapping[str, Any], observer: object = None) -> None:
    """Report observed values to the current reporter; do nothing if none is current.

    Args:
        values: Maps names to values: numbers, tensors (any device), arrays, or zero-argument
            callables.
        observer: A registered observer whose name prefixes the value names; ``None`` keeps
            the names as given.

    Raises:
        KeyError: ``observer`` is not registered to the current reporter.

    Example:
        >>> class Regressor(torch.nn.Module):
        ...     def forward(self, x, y):
        ...         loss = torch.nn.functional.mse_loss(x, y)
        ...         report({"loss": loss}, self)  # "main/loss" if registered as "main"
        ...         return loss
    """
    reporters = _local.reporters
    if reporters:
        reporters[-1].report(values, observer)


@contextlib.contextmanager
def report_scope(observation: Observation) -> Iterator[None]:
    """Report to ``observation`` with the current reporter inside the block.

    Equivalent to ``get_current_reporter().scope(observation)``, except that it does not make
    the reporter current again.

    Args:
        observation: The dict that receives the values reported inside the block.

    Raises:
        RuntimeError: no reporter is current in this thread.
    """
    current = get_current_reporter()
    old = current.observation
    current.observation = observation
    try:
        yield
    finally:
        current.observation = old
