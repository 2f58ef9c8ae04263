"""LRScheduler: steps a learning-rate scheduler at a trigger."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import torch

from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

Stepper: TypeAlias = Callable[["ExtensionsManagerProtocol", Any], None]
"""``stepper(manager, scheduler)``: steps the scheduler once."""

_PLATEAU_KEY = "val/loss"


def _step_by_value(key: str) -> Stepper:
    def stepper(manager: ExtensionsManagerProtocol, scheduler: Any) -> None:
        observation = manager.observation
        if key not in observation:
            message = (
                f"LRScheduler: cannot step {type(scheduler).__name__}: no value reported under "
                f"{key!r} at iteration {manager.iteration} (reported: {sorted(observation)}). "
                "Report it in the iterations where the scheduler steps (e.g. an Evaluator with "
                "the same trigger), or pass stepper=LRScheduler.step_by_value(<key>)"
            )
            raise ValueError(message)
        scheduler.step(observation[key])

    return stepper


_step_by_plateau_key = _step_by_value(_PLATEAU_KEY)


def _before_first_optimizer_step(scheduler: Any) -> bool:
    """Whether the step counter that torch's schedulers put on their optimizer shows no step.

    False when there is no counter to read (a scheduler of your own, an optimizer whose
    ``step`` was replaced after the scheduler was made): such schedulers always step.
    """
    optimizer = getattr(scheduler, "optimizer", None)
    step = getattr(optimizer, "step", None)
    if hasattr(step, "_wrapped_by_lr_sched"):  # torch >= 2.2 sets optimizer._opt_called
        return not getattr(optimizer, "_opt_called", False)
    if hasattr(step, "_with_counter"):  # torch 2.1 counts in optimizer._step_count
        return getattr(optimizer, "_step_count", 0) < 1
    return False


def _default_stepper(manager: ExtensionsManagerProtocol, scheduler: Any) -> None:
    """``scheduler.step()``; ``ReduceLROnPlateau`` steps with the value of ``'val/loss'``."""
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        _step_by_plateau_key(manager, scheduler)
    else:
        scheduler.step()


class LRScheduler(Extension):
    """An extension that steps a learning-rate scheduler.

    At each firing of ``trigger`` it calls ``stepper(manager, scheduler)``. The default
    stepper calls ``scheduler.step()``, or, for a
    :class:`torch.optim.lr_scheduler.ReduceLROnPlateau`,
    ``scheduler.step(manager.observation['val/loss'])``; use :meth:`step_by_value` to step
    on another reported value. The extension has the reader priority, so it runs after the
    extensions that report values in the same iteration (evaluators, accumulators). The
    scheduler's state is saved in snapshots.

    Args:
        scheduler: Any scheduler with ``step()`` (and ``state_dict``/``load_state_dict`` to
            be saved in snapshots).
        stepper: ``stepper(manager, scheduler)``, called at each firing.
        trigger: When to step; each epoch by default.
        wait_for_first_optimizer_step: Do not step a PyTorch scheduler before its
            optimizer has stepped once (e.g. while a ``GradScaler`` skips the first steps),
            which avoids PyTorch's "``lr_scheduler.step()`` before ``optimizer.step()``"
            warning. It reads the step counter PyTorch's schedulers put on their optimizer;
            a scheduler whose optimizer has none (one of your own) always steps.
        is_async: Marks the extension as safe to run in the background (it reads no model
            state).

    Raises:
        TypeError: ``scheduler`` has no ``step`` method, or ``stepper`` is not callable.
        ValueError: (when stepping) the default stepper of a ``ReduceLROnPlateau``, or one
            of :meth:`step_by_value`, finds no value reported under its key.

    Example:
        >>> scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        >>> manager.extend(LRScheduler(scheduler))
        >>> plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        >>> manager.extend(
        ...     LRScheduler(plateau, stepper=LRScheduler.step_by_value("train/loss"))
        ... )
    """

    priority = PRIORITY_READER

    def __init__(
        self,
        scheduler: Any,
        *,
        stepper: Stepper = _default_stepper,
        trigger: TriggerLike = (1, "epoch"),
        wait_for_first_optimizer_step: bool = False,
        is_async: bool = True,
    ) -> None:
        if not callable(getattr(scheduler, "step", None)):
            message = (
                "LRScheduler needs a scheduler with a step() method, got "
                f"{type(scheduler).__name__}: {scheduler!r}"
            )
            raise TypeError(message)
        if not callable(stepper):
            message = (
                f"LRScheduler: stepper must be callable as stepper(manager, scheduler), "
                f"got {stepper!r}"
            )
            raise TypeError(message)
        get_trigger(trigger)  # a malformed trigger fails here, not at extend()
        self.scheduler = scheduler
        self.trigger = trigger
        self.is_async = is_async
        self._stepper = stepper
        self._wait = wait_for_first_optimizer_step
        self._optimizer_stepped = False

    @staticmethod
    def step_by_value(key: str) -> Stepper:
        """Return a stepper calling ``scheduler.step(manager.observation[key])``.

        Args:
            key: Key of the reported value (e.g. ``'val/loss'``).

        Returns:
            The stepper; it raises ``ValueError`` naming ``key`` when that was not reported
            in the iteration where the scheduler steps.

        Raises:
            ValueError: ``key`` is not a non-empty string.
        """
        if not isinstance(key, str) or not key:
            message = f"LRScheduler.step_by_value: key must be a non-empty string, got {key!r}"
            raise ValueError(message)
        return _step_by_value(key)

    def _may_step(self) -> bool:
        if not self._wait or self._optimizer_stepped:
            return True
        self._optimizer_stepped = not _before_first_optimizer_step(self.scheduler)
        return self._optimizer_stepped

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Step the scheduler (unless waiting for the optimizer's first step)."""
        if self._may_step():
            self._stepper(manager, self.scheduler)

    def state_dict(self) -> dict[str, Any]:
        """Return the scheduler's state (and whether the optimizer has stepped)."""
        state_dict = getattr(self.scheduler, "state_dict", None)
        return {
            "scheduler": state_dict() if callable(state_dict) else {},
            "optimizer_stepped": self._optimizer_stepped,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        load_state_dict = getattr(self.scheduler, "load_state_dict", None)
        if callable(load_state_dict):
            load_state_dict(state["scheduler"])
        self._optimizer_stepped = bool(state.get("optimizer_stepped", False))
