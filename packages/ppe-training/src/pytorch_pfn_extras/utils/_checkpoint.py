"""Activation checkpointing that updates normalization statistics once per forward."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
import torch.utils.checkpoint
from torch.nn.modules.batchnorm import _NormBase
from torch.utils.hooks import RemovableHandle

__all__ = ["checkpoint"]

_T = TypeVar("_T")


# The buffers a normalization layer updates in a training-mode forward.
_RUNNING_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")

# Copies of one module's running buffers, by buffer name (absent where the module has none).
_RunningStats = dict[str, torch.Tensor]


def _tracks_running_stats(module: torch.nn.Module) -> bool:
    # ``_NormBase`` covers every BatchNorm (SyncBatchNorm and the lazy ones too) and
    # InstanceNorm; they update their running buffers only in training mode.
    return isinstance(module, _NormBase) and module.training and module.track_running_stats


def _save(module: torch.nn.Module) -> _RunningStats:
    stats: _RunningStats = {}
    for name in _RUNNING_BUFFERS:
        buffer = getattr(module, name, None)
        if isinstance(buffer, torch.Tensor):
            stats[name] = buffer.detach().clone()
    return stats


def _restore(module: torch.nn.Module, stats: _RunningStats) -> None:
    with torch.no_grad():
        for name, saved in stats.items():
            getattr(module, name).copy_(saved)


class _KeepRunningStats:
    """Recomputation context that undoes the running-statistics updates made inside it.

    On entry it registers global module hooks. The first time a normalization module in
    training mode is called inside the context (on the thread that entered it), its running
    buffers are copied; they are written back after each of its forwards and again on exit,
    which also covers a recomputation that torch stops early or that raises. Calls on other
    threads are left alone. The same instance is entered once per backward that recomputes
    (``retain_graph=True`` gives several), so every entry starts afresh.
    """

    def __init__(self) -> None:
        self._thread_id: int | None = None
        self._saved: dict[torch.nn.Module, _RunningStats] = {}
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> None:
        self._thread_id = threading.get_ident()
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward),
            torch.nn.modules.module.register_module_forward_hook(self._after_forward),
        ]

    def __exit__(self, *exc_info: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for module, stats in self._saved.items():
            _restore(module, stats)
        self._saved = {}
        self._thread_id = None

    def _ours(self, module: torch.nn.Module) -> bool:
        return threading.get_ident() == self._thread_id and _tracks_running_stats(module)

    def _before_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._ours(module) and module not in self._saved:
            self._saved[module] = _save(module)

    def _after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() == self._thread_id and module in self._saved:
            _restore(module, self._saved[module])


def _contexts() -> tuple[contextlib.nullcontext[None], _KeepRunningStats]:
    return contextlib.nullcontext(), _KeepRunningStats()


_TORCH_OPTIONS = ("preserve_rng_state", "determinism_check", "debug")


def checkpoint(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Run ``function`` without keeping its activations; recompute them in backward.

    Like :func:`torch.utils.checkpoint.checkpoint` (non-reentrant), except that the
    running statistics of normalization layers (``running_mean``, ``running_var``,
    ``num_batches_tracked`` of every BatchNorm, SyncBatchNorm and InstanceNorm with
    ``track_running_stats``) are updated once per forward, as without checkpointing,
    instead of again by the recomputation. ``function`` may be a module or any callable,
    such as a closure over modules. Under :func:`torch.no_grad` it simply runs ``function``.

    Args:
        function: The computation to checkpoint; called as ``function(*args)``.
        *args: Positional arguments for ``function``; tensors among them need not require
            grad.
        **kwargs: Options of :func:`torch.utils.checkpoint.checkpoint`:
            ``preserve_rng_state`` (``True``: replay the forward's random number generator
            state in the recomputation, so that dropout gives the same result and the
            gradients equal those without checkpointing), ``determinism_check``, ``debug``,
            and ``use_reentrant=False`` (the only mode that keeps the statistics right);
            other keywords are passed to ``function``.

    Returns:
        What ``function(*args)`` returns (a tensor or a tuple of them, for instance).

    Raises:
        TypeError: If ``function`` is not callable.
        ValueError: ``use_reentrant=True``, or a ``context_fn`` (checkpoint brings its own).

    Example:
        >>> block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
        >>> x = torch.randn(4, 8, requires_grad=True)
        >>> y = checkpoint(block, x)
        >>> y.sum().backward()
        >>> int(block[1].num_batches_tracked)
        1
    """
    if not callable(function):
        message = f"checkpoint needs a callable function, got {type(function).__name__}"
        raise TypeError(message)
    if kwargs.pop("use_reentrant", False):
        message = (
            "checkpoint(use_reentrant=True) is not supported: the running statistics are kept "
            "right only by the non-reentrant implementation (use_reentrant=False)"
        )
        raise ValueError(message)
    if "context_fn" in kwargs:
        message = "checkpoint sets its own context_fn (to update the running statistics once)"
        raise ValueError(message)
    options = {name: kwargs.pop(name) for name in _TORCH_OPTIONS if name in kwargs}
    if not torch.is_grad_enabled():
        return function(*args, **kwargs)
    output = torch.utils.checkpoint.checkpoint(
        function,
        *args,
        use_reentrant=False,
        context_fn=_contexts,
        **options,
        **kwargs,
    )
    return cast(_T, output)
