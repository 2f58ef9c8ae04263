"""Values a comparer records: naming and copying them, and comparing two engines' values.

:func:`intermediate_value` captures into the thread-local :data:`_capture`, which the
recorder of a comparer (:mod:`._comparer_record`) opens around each triggered step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import torch

from pytorch_pfn_extras.training import Evaluator, Trainer

CompareFn: TypeAlias = Callable[[str, str, str, Any, Any], None]
Engine: TypeAlias = Trainer | Evaluator
# What one engine recorded at one step, by name ("outputs/loss", "params/main/w.weight"...).
Values: TypeAlias = dict[str, Any]


def get_default_comparer(rtol: float = 1e-4, atol: float = 0, equal_nan: bool = True) -> CompareFn:
    """Return a ``compare_fn`` that asserts that two values are close.

    The values are compared as by ``torch.testing.assert_close(val2, val1, rtol=rtol,
    atol=atol, equal_nan=equal_nan)`` (``val1``, the baseline's, is the expected one), except
    that tensors on different devices or of different dtypes are compared by value: engines
    on different backends are what comparers are for.

    Args:
        rtol: Relative tolerance.
        atol: Absolute tolerance.
        equal_nan: Whether NaNs at the same positions count as equal.

    Returns:
        ``compare_fn(backend1, backend2, name, val1, val2)``, which raises an
        :class:`AssertionError` naming both engines and the value when they differ.

    Example:
        >>> comparer = Comparer(compare_fn=get_default_comparer(rtol=1e-3, atol=1e-6))
    """

    def compare_fn(backend1: str, backend2: str, name: str, val1: Any, val2: Any) -> None:
        try:
            torch.testing.assert_close(
                val2,
                val1,
                rtol=rtol,
                atol=atol,
                equal_nan=equal_nan,
                check_device=False,
                check_dtype=False,
            )
        except AssertionError as error:
            message = f"{name!r} of {backend2!r} is not close to that of {backend1!r}: {error}"
            raise AssertionError(message) from None

    return compare_fn


_DEFAULT_COMPARE_FN = get_default_comparer()


class _Capture(threading.local):
    # The intermediate values of the step running on this thread; None outside a
    # recorded step, which makes intermediate_value() a no-op.
    values: Values | None = None


_capture = _Capture()


def _snapshot(value: Any) -> Any:
    """A detached CPU copy of the tensors in ``value``; containers are copied, other values kept."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, Mapping):
        return {key: _snapshot(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_snapshot(item) for item in value]
    if isinstance(value, tuple):  # named tuples too: a dump stores only plain containers
        return tuple(_snapshot(item) for item in value)
    return value


def intermediate_value(name: str, value: Any) -> None:
    """Record a value computed inside a model's forward, for the comparer running it.

    While a :class:`Comparer` runs the engine that calls the model (and its trigger selects
    the current step), ``value`` is copied and compared across engines as
    ``"intermediates/<name>"``, before the outputs: the first intermediate value that
    diverges shows where two models start to differ. A name recorded several times in one
    step is compared occurrence by occurrence (``name``, ``name[1]``, ``name[2]``...).
    Anywhere else (no comparer, another thread, an evaluation run by a compared trainer)
    it does nothing.

    Args:
        name: Name of the value.
        value: A tensor, a number, or a list/tuple/dict of them.

    Example:
        >>> def forward(self, x):
        ...     h = self.encoder(x)
        ...     ppe.utils.comparer.intermediate_value("hidden", h)
        ...     return {"loss": self.head(h).sum()}
    """
    values = _capture.values
    if values is None:
        return
    if not isinstance(name, str):
        message = f"intermediate_value() needs a str name, got {name!r}"
        raise TypeError(message)
    key = base = f"intermediates/{name}"
    occurrence = 0
    while key in values:
        occurrence += 1
        key = f"{base}[{occurrence}]"
    values[key] = _snapshot(value)


def _names(value: Any, argument: str) -> bool | tuple[str, ...]:
    """``True``/``False``, or the names of a ``str``/list-of-``str`` selection."""
    if isinstance(value, bool):
        return value
    names = (
        (value,)
        if isinstance(value, str)
        else tuple(value)
        if isinstance(value, Sequence)
        else None
    )
    if names is None or not all(isinstance(name, str) for name in names):
        message = f"{argument} must be True, False or a list of names, got {value!r}"
        raise TypeError(message)
    return names


def _named_outputs(outputs: Any) -> dict[str, Any]:
    if outputs is None:
        return {}
    if isinstance(outputs, Mapping):
        return {str(key): value for key, value in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return {str(index): value for index, value in enumerate(outputs)}
    return {"output": outputs}


def _selected(
    available: dict[str, Any], names: bool | tuple[str, ...], what: str
) -> dict[str, Any]:
    if names is True:
        return available
    if names is False:
        return {}
    missing = [name for name in names if name not in available]
    if missing:
        message = f"no {what} named {missing}; the {what}s are {sorted(available)}"
        raise ValueError(message)
    return {name: available[name] for name in names}


@dataclass(frozen=True)
class _Selection:
    """Which outputs and parameters an engine records (``True``: all of them)."""

    outputs: bool | tuple[str, ...]
    params: bool | tuple[str, ...]

    def collect(self, engine: Engine, outputs: Any, intermediates: Values) -> Values:
        values = dict(intermediates)
        for key, value in _selected(_named_outputs(outputs), self.outputs, "output").items():
            values[f"outputs/{key}"] = _snapshot(value)
        if self.params is not False:
            parameters = {
                f"{model_name}/{name}": parameter
                for model_name, model in engine.models.items()
                for name, parameter in model.named_parameters()
            }
            for key, value in _selected(parameters, self.params, "parameter").items():
                values[f"params/{key}"] = _snapshot(value)
        return values


def _check_values(
    compare_fn: CompareFn, baseline: str, name: str, step: int, expected: Values, values: Values
) -> None:
    """Compare the values ``name`` recorded at ``step`` with the baseline's, in order."""
    missing = [key for key in expected if key not in values]
    extra = [key for key in values if key not in expected]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"it has no {missing}")
        if extra:
            problems.append(f"it has {extra}, which the baseline has not")
        message = f"{name!r} diverges from {baseline!r} at iteration {step}: " + "; ".join(problems)
        raise AssertionError(message)
    for key, value in expected.items():
        try:
            compare_fn(baseline, name, key, value, values[key])
        except AssertionError as error:
            message = f"{name!r} diverges from {baseline!r} at iteration {step} on {key!r}: {error}"
            raise AssertionError(message) from error
