"""ExtensionsManager: extensions, triggers and snapshots around a hand-written loop."""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from pytorch_pfn_extras.training._base_manager import (
    ModelsLike,
    OptimizersLike,
    TransformModel,
    _BaseExtensionsManager,
)
from pytorch_pfn_extras.training._extension import ExtensionLike
from pytorch_pfn_extras.training._trigger_checks import check_epoch_length
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.writing import Writer


class _Iteration:
    """The context manager returned by :meth:`ExtensionsManager.run_iteration`."""

    __slots__ = ("_manager", "_optimizers")

    def __init__(
        self, manager: ExtensionsManager, optimizers: Sequence[torch.optim.Optimizer]
    ) -> None:
        self._manager = manager
        self._optimizers = optimizers

    def __enter__(self) -> None:
        manager = self._manager
        if not manager._started:
            manager.start_extensions()
        manager._check_can_iterate()
        for optimizer in self._optimizers:
            optimizer.zero_grad()
        manager._begin_iteration()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        manager = self._manager
        if exc is not None:
            manager._fail_iteration(exc, tb)
            return
        try:
            for optimizer in self._optimizers:
                optimizer.step()
            manager._run.iteration += 1
            manager._end_iteration()
        except BaseException as error:
            manager._fail_iteration(error, error.__traceback__)
            raise


class ExtensionsManager(_BaseExtensionsManager):
    """Manages the extensions and the state of a hand-written training loop.

    Wrap each iteration in :meth:`run_iteration`; after it, the extensions whose trigger
    fires run in priority order. Loop with ``while not manager.stop_trigger`` so that a run
    resumed from a snapshot (or already finished) does exactly the remaining iterations.

    Args:
        models: A module, or a mapping of names to modules (a single one is named ``'main'``).
        optimizers: An optimizer, or a mapping of names to optimizers.
        max_epochs: Number of epochs of training; ignored when ``stop_trigger`` is given.
        iters_per_epoch: Number of iterations in one epoch (usually ``len(loader)``).
        extensions: Extensions to register (like calling :meth:`extend` on each).
        out_dir: Output directory of logs and snapshots.
        stop_trigger: Trigger that ends training; ``(max_epochs, 'epoch')`` by default. Its
            state is saved in snapshots, so e.g. an
            :class:`~pytorch_pfn_extras.training.triggers.EarlyStoppingTrigger` resumes exactly.
        writer: Writer extensions use to write into ``out_dir``; a
            :class:`~pytorch_pfn_extras.writing.SimpleWriter` by default. Any callable
            ``writer(filename, out_dir, target, *, savefun=None, append=False)`` is
            accepted too (its ``initialize(out_dir)`` and ``finalize()`` are called if it
            has them); without an ``fs`` attribute it writes to the local file system.
        transform_model: ``fn(name, model) -> model`` applied to each model for
            :attr:`models` and snapshots (e.g. ``lambda n, m: m.module`` to unwrap DDP).
        enable_profile: Record each extension with :func:`pytorch_pfn_extras.profiler.record`
            (into the profiler's time summary).
        enable_trace: Also record each extension in the Chrome tracer.
        state_objects: Other objects with ``state_dict``/``load_state_dict`` to save in
            snapshots (LR schedulers, grad scalers...), by name.

    Raises:
        ValueError: ``iters_per_epoch`` is not a positive integer or ``max_epochs`` is not
            positive.
        TypeError: ``models``, ``optimizers`` or ``state_objects`` have the wrong type, or
            ``writer`` is not callable.

    Example:
        >>> manager = ExtensionsManager(model, optimizer, 10, iters_per_epoch=len(loader),
        ...                             extensions=[extensions.LogReport()])
        >>> while not manager.stop_trigger:
        ...     for x, t in loader:
        ...         with manager.run_iteration():
        ...             loss = F.cross_entropy(model(x), t)
        ...             ppe.reporting.report({"train/loss": loss.item()})
        ...             loss.backward()
        ...             optimizer.step()
    """

    def __init__(
        self,
        models: ModelsLike,
        optimizers: OptimizersLike,
        max_epochs: float,
        *,
        iters_per_epoch: int,
        extensions: Iterable[ExtensionLike] | None = None,
        out_dir: str | os.PathLike[str] = "result",
        stop_trigger: TriggerLike = None,
        writer: Writer | None = None,
        transform_model: TransformModel = lambda n, x: x,
        enable_profile: bool = False,
        enable_trace: bool = False,
        state_objects: Mapping[str, Any] | None = {},
    ) -> None:
        super().__init__(
            models,
            optimizers,
            max_epochs,
            extensions,
            out_dir,
            writer,
            stop_trigger=stop_trigger,
            transform_model=transform_model,
            enable_profile=enable_profile,
            enable_trace=enable_trace,
            state_objects=state_objects,
            epoch_length=check_epoch_length(iters_per_epoch),
        )

    def run_iteration(self, *, step_optimizers: Sequence[str] | None = None) -> _Iteration:
        """Context manager wrapping one iteration.

        On entry the extensions start (first iteration only) and a fresh observation is
        opened with the manager's reporter current; on exit the iteration is counted and the
        triggered extensions run. If the body (or an extension) raises, every extension's
        ``on_error`` is called once, the finalizers run, the writer is flushed and the
        exception propagates unchanged; no extension runs after that.

        Args:
            step_optimizers: Names of optimizers to ``zero_grad()`` on entry and ``step()``
                on exit.

        Raises:
            ValueError: An unknown optimizer name.
            RuntimeError: Training has finished or failed, or iterations are nested.

        Example:
            >>> with manager.run_iteration(step_optimizers=["main"]):
            ...     model(x).sum().backward()
        """
        if not step_optimizers:
            return _Iteration(self, ())
        if isinstance(step_optimizers, str):
            step_optimizers = [step_optimizers]
        optimizers = []
        for name in step_optimizers:
            optimizer = self._optimizers.get(name)
            if optimizer is None:
                message = (
                    f"step_optimizers names an unknown optimizer {name!r}; "
                    f"the manager has {sorted(self._optimizers)}"
                )
                raise ValueError(message)
            optimizers.append(optimizer)
        return _Iteration(self, optimizers)
