"""Validation and exact arithmetic shared by the triggers."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

from pytorch_pfn_extras.interop import is_int

_UNITS = ("iteration", "epoch")


def check_unit(unit: Any, owner: str) -> None:
    if unit not in _UNITS:
        message = f"{owner}: unit must be 'iteration' or 'epoch', got {unit!r}"
        raise ValueError(message)


def as_number(value: Any, what: str, owner: str) -> float:
    """Check that ``value`` is a finite real number (not a bool) and return it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        message = f"{owner}: {what} must be a number, got {value!r} of type {type(value).__name__}"
        raise TypeError(message)
    if not math.isfinite(value):
        message = f"{owner}: {what} must be finite, got {value!r}"
        raise ValueError(message)
    return value  # type: ignore[return-value]


def check_epoch_length(epoch_length: Any) -> int:
    """Return ``epoch_length`` as an int, checked to be a positive integer."""
    if not is_int(epoch_length) or epoch_length < 1:
        message = f"iters_per_epoch must be a positive integer, got {epoch_length!r}"
        raise ValueError(message)
    return int(epoch_length)


def exact_fraction(value: float) -> Fraction:
    """The fraction a user meant by ``value`` (``0.1`` -> ``1/10``, not the binary float)."""
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(repr(float(value)))


def iteration_of_epoch_point(point: Fraction, epoch_length: int) -> int:
    """The first iteration at which ``epoch_detail >= point``."""
    return math.ceil(point * epoch_length)
