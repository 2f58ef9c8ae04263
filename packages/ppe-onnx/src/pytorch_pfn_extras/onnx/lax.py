"""Loops and conditionals in the style of ``jax.lax``: ``fori_loop``, ``while_loop``, ``cond``.

In PyTorch they run as Python control flow. In a TorchScript-based export torch 2.13 records
what the tracer sees: ``fori_loop`` unrolls its iterations (integer bounds), ``cond`` with a
tensor predicate exports both branches and a ``Where`` choosing between them, and
``while_loop`` raises ``NotImplementedError`` (its trip count depends on the data). PPE 0.9
emitted ONNX ``Loop`` / ``If`` nodes instead; the computed values are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["cond", "fori_loop", "while_loop"]

_T = TypeVar("_T")


def _exporting() -> bool:
    return bool(torch.onnx.is_in_onnx_export()) and torch._C._get_tracing_state() is not None


def fori_loop(lower: int, upper: int, body_fun: Callable[[int, _T], _T], init_val: _T) -> _T:
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)``; returns ``val``."""
    if isinstance(lower, torch.Tensor) or isinstance(upper, torch.Tensor):
        lower, upper = int(lower), int(upper)
    val = init_val
    for i in range(lower, upper):
        val = body_fun(i, val)
    return val


def while_loop(cond_fun: Callable[[_T], Any], body_fun: Callable[[_T], _T], init_val: _T) -> _T:
    """``val = body_fun(val)`` while ``cond_fun(val)`` holds; returns ``val``."""
    if _exporting():
        message = (
            "lax.while_loop cannot be exported with torch "
            f"{torch.__version__}'s TorchScript-based exporter: its trip count depends on the "
            "data; use lax.fori_loop with a fixed number of iterations"
        )
        raise NotImplementedError(message)
    val = init_val
    while bool(cond_fun(val)):
        val = body_fun(val)
    return val


def cond(
    pred: bool | torch.Tensor,
    true_fun: Callable[..., torch.Tensor],
    false_fun: Callable[..., torch.Tensor],
    *operands: Any,
) -> torch.Tensor:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    In an export with a tensor ``pred`` both branches run and ``torch.where`` picks one, so
    they must return tensors of the same shape and be free of side effects.
    """
    if _exporting() and isinstance(pred, torch.Tensor):
        return torch.where(pred.bool(), true_fun(*operands), false_fun(*operands))
    return true_fun(*operands) if bool(pred) else false_fun(*operands)
