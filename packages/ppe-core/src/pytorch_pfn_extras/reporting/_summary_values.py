"""The kinds of values a summary takes (dispatched on their type), its sums, and its checks."""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np
import torch

# One of these kinds per value type; unknown types are classified once and cached.
_NUMBER = 0
_TENSOR = 1
_ARRAY = 2
_CALLABLE = 3
_TUPLE = 4
_OTHER = 5

_KINDS: dict[type, int] = {
    float: _NUMBER,
    int: _NUMBER,
    bool: _NUMBER,
    torch.Tensor: _TENSOR,
    torch.nn.Parameter: _TENSOR,
    np.ndarray: _ARRAY,
    tuple: _TUPLE,
    str: _OTHER,
    bytes: _OTHER,
    type(None): _OTHER,
}


def _kind_of(value: object) -> int:
    try:
        return _KINDS[type(value)]
    except KeyError:
        return _classify(value)


def _classify(value: object) -> int:
    """The kind of a value whose type is not in ``_KINDS`` yet; the type is added."""
    cls = type(value)
    if issubclass(cls, torch.Tensor):
        kind = _TENSOR
    elif issubclass(cls, (str, bytes)):
        kind = _OTHER
    elif issubclass(cls, (np.ndarray, np.generic)):
        kind = _ARRAY
    elif issubclass(cls, numbers.Real):
        kind = _NUMBER
    elif issubclass(cls, tuple):
        kind = _TUPLE
    elif callable(value):
        kind = _CALLABLE
    else:
        kind = _OTHER
    _KINDS[cls] = kind
    return kind


class _Totals(NamedTuple):
    """Weighted sums of a summary: of the values, of their squares, and of the weights."""

    x: float
    x2: float
    n: float

    def state(self) -> dict[str, float]:
        """The sums as a :meth:`Summary.state_dict` (PPE's keys)."""
        return {"_x": self.x, "_x2": self.x2, "_n": self.n}


class _DeviceTotals(NamedTuple):
    """:class:`_Totals` of a summary that received tensors: 0-d accumulator tensors (float64;
    float32 on MPS), with ``n`` a float when every weight was a number."""

    x: torch.Tensor
    x2: torch.Tensor
    n: torch.Tensor | float


def _to_host(totals: list[_Totals | _DeviceTotals]) -> list[_Totals]:
    """Convert the sums to Python floats with one host transfer per device."""
    tensors: dict[torch.device, list[torch.Tensor]] = {}
    for total in totals:
        for value in total:
            if isinstance(value, torch.Tensor):
                tensors.setdefault(value.device, []).append(value)
    floats: dict[int, float] = {}
    for group in tensors.values():
        for tensor, value in zip(group, torch.stack(group).tolist()):
            floats[id(tensor)] = float(value)
    return [
        _Totals._make(floats[id(v)] if isinstance(v, torch.Tensor) else float(v) for v in total)
        for total in totals
    ]


def _describe(value: object) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} of shape {tuple(value.shape)}"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _check_weight(weight: Any, key: str | None = None) -> None:
    kind = _kind_of(weight)
    if kind == _NUMBER or (kind in (_TENSOR, _ARRAY) and weight.ndim == 0):
        return
    where = "" if key is None else f" of {key!r}"
    message = (
        f"weight{where} must be a scalar (number, 0-d tensor or array), got {_describe(weight)}"
    )
    raise ValueError(message)


def _sum_tensors(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None:
        return None if b is None else b.clone()
    if b is None:
        return a.clone()
    return a + b.to(a.device)


def _mean(x: float, n: float) -> float:
    if n == 0:
        message = "cannot compute the mean of a summary whose total weight is 0 (nothing added)"
        raise ValueError(message)
    return x / n


def _statistics(totals: _Totals) -> tuple[float, float]:
    mean = _mean(totals.x, totals.n)
    var = totals.x2 / totals.n - mean * mean
    return mean, var**0.5 if var > 0 else 0.0
