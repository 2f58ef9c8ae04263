"""Loops and conditionals in the style of ``jax.lax``, exported as ONNX ``Loop`` and ``If``.

In PyTorch they run as Python control flow. In a TorchScript-based export, where the tracer
would unroll a Python loop and keep only the branch taken, they export the control flow itself:
``fori_loop`` and ``while_loop`` an ONNX ``Loop`` (a trip count or a condition computed from the
inputs), ``cond`` with a tensor predicate an ONNX ``If``. The body is traced once, so it must
compute the same operations whatever the values (no Python control flow on tensor values).

The loop state (``init_val``) is a tensor or a tuple or list of tensors; the body returns the
same structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import torch

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.onnx import _torch_onnx

__all__ = ["cond", "fori_loop", "while_loop"]

_T = TypeVar("_T")


def _flatten(value: Any, what: str) -> list[torch.Tensor]:
    items = [value] if isinstance(value, torch.Tensor) else value
    if not isinstance(items, tuple | list) or not items:
        message = f"{what} must be a tensor or a tuple or list of tensors, got {value!r}"
        raise TypeError(message)
    return _torch_onnx.check_tensors(what, items)


def _unflatten(like: Any, items: Sequence[torch.Tensor]) -> Any:
    if isinstance(like, torch.Tensor):
        return items[0]
    return type(like)(items)


def _as_index(value: int | torch.Tensor, name: str) -> int | torch.Tensor:
    if isinstance(value, torch.Tensor):
        with _torch_onnx.untraced():  # sizes are traced values in an export
            size = value.numel()
        if size != 1 or value.dtype.is_floating_point or value.dtype.is_complex:
            message = (
                f"fori_loop's {name} must be an int or a 1-element integer tensor, got {value!r}"
            )
            raise TypeError(message)
        return value.reshape(())
    if not is_int(value):
        message = f"fori_loop's {name} must be an int or a 1-element integer tensor, got {value!r}"
        raise TypeError(message)
    return value


def fori_loop(
    lower: int | torch.Tensor,
    upper: int | torch.Tensor,
    body_fun: Callable[[Any, _T], _T],
    init_val: _T,
) -> _T:
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)``; returns ``val``.

    Exported as an ONNX ``Loop``; ``lower`` and ``upper`` may be tensors computed from the
    inputs (the trip count then follows the data). In PyTorch ``i`` is an int, in the traced
    body a 0-d int64 tensor.
    """
    lower = _as_index(lower, "lower")
    upper = _as_index(upper, "upper")

    def run() -> _T:
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val

    if not _torch_onnx.in_export():
        return run()
    carried = _flatten(init_val, "fori_loop's init_val")
    with _torch_onnx.untraced():
        result = run()
    results = _flatten(result, "what fori_loop's body_fun returns")
    trip_count: int | torch.Tensor
    if isinstance(lower, torch.Tensor) or isinstance(upper, torch.Tensor):
        trip_count = torch.clamp(
            cast(torch.Tensor, upper - lower), min=0
        )  # no constant tensor: no TracerWarning
    else:
        trip_count = max(upper - lower, 0)

    def body(index: torch.Tensor, values: list[torch.Tensor]) -> tuple[None, list[torch.Tensor]]:
        i = index if isinstance(lower, int) and lower == 0 else index + lower
        out = body_fun(i, _unflatten(init_val, values))
        return None, _flatten(out, "what fori_loop's body_fun returns")

    _torch_onnx.trace_loop(trip_count, None, carried, body, results)
    return result


def while_loop(cond_fun: Callable[[_T], Any], body_fun: Callable[[_T], _T], init_val: _T) -> _T:
    """``val = body_fun(val)`` while ``cond_fun(val)`` holds; returns ``val``.

    Exported as an ONNX ``Loop`` with a condition and no trip count when ``cond_fun`` returns a
    tensor; a Python bool is a condition fixed at export time, and the loop is unrolled.
    """

    def run(condition: Any) -> _T:
        val = init_val
        while bool(condition):
            val = body_fun(val)
            condition = cond_fun(val)
        return val

    if not _torch_onnx.in_export():
        return run(cond_fun(init_val))
    carried = _flatten(init_val, "while_loop's init_val")
    condition = cond_fun(init_val)
    if not isinstance(condition, torch.Tensor):
        return run(condition)
    with _torch_onnx.untraced():
        result = run(condition)
    results = _flatten(result, "what while_loop's body_fun returns")

    def body(index: torch.Tensor, values: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
        out = body_fun(_unflatten(init_val, values))
        next_condition = cond_fun(out)
        if not isinstance(next_condition, torch.Tensor):
            message = (
                "while_loop's cond_fun returned a tensor for init_val but "
                f"{type(next_condition).__name__} for the body's result: it must return a tensor"
            )
            raise TypeError(message)
        return next_condition, _flatten(out, "what while_loop's body_fun returns")

    _torch_onnx.trace_loop(None, condition, carried, body, results)
    return result


def cond(
    pred: bool | torch.Tensor,
    true_fun: Callable[..., Any],
    false_fun: Callable[..., Any],
    *operands: Any,
) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    With a tensor ``pred`` it is exported as an ONNX ``If`` whose branches are both traced:
    they must return the same structure of tensors and be free of side effects.
    """
    if not _torch_onnx.in_export() or not isinstance(pred, torch.Tensor):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    with _torch_onnx.untraced():
        result = true_fun(*operands) if bool(pred) else false_fun(*operands)
    results = _flatten(result, "what cond's branches return")
    branches = [
        lambda: _flatten(true_fun(*operands), "what cond's true_fun returns"),
        lambda: _flatten(false_fun(*operands), "what cond's false_fun returns"),
    ]
    _torch_onnx.trace_if(pred, branches, results)
    return result
