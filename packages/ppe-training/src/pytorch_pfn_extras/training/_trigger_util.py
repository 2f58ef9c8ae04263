"""get_trigger, and the names of the trigger base module for the extensions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger
from pytorch_pfn_extras.training._trigger_base import Trigger, TriggerLike, UnitLiteral

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

__all__ = ["Trigger", "TriggerLike", "UnitLiteral", "get_trigger"]


class _NeverFireTrigger(Trigger):
    """The trigger of ``None``: never fires."""

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        return False

    def may_fire(self, iteration: int, epoch_len: int) -> bool:
        return False

    def __repr__(self) -> str:
        return "get_trigger(None)"


class _CallableTrigger(Trigger):
    """Wraps a plain callable ``fn(manager) -> bool``; keeps its state if it has one."""

    def __init__(self, fn: Callable[[ExtensionsManagerProtocol], bool]) -> None:
        self._fn = fn

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        return bool(self._fn(manager))

    def state_dict(self) -> dict[str, Any]:
        state_dict = getattr(self._fn, "state_dict", None)
        return dict(state_dict()) if callable(state_dict) else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        load_state_dict = getattr(self._fn, "load_state_dict", None)
        if callable(load_state_dict):
            load_state_dict(state)

    def __repr__(self) -> str:
        return f"get_trigger({self._fn!r})"


def get_trigger(trigger: TriggerLike) -> Trigger:
    """Turn a trigger-like value into a :class:`Trigger`.

    Args:
        trigger: A :class:`Trigger` (returned as is), a ``(period, unit)`` tuple or list
            (an :class:`~pytorch_pfn_extras.training.triggers.IntervalTrigger`), a callable
            ``fn(manager) -> bool``, or ``None`` (a trigger that never fires).

    Returns:
        The trigger.

    Raises:
        TypeError: ``trigger`` is none of the above.

    Example:
        >>> get_trigger((2, "epoch"))
        IntervalTrigger(2, 'epoch')
    """
    if isinstance(trigger, Trigger):
        return trigger
    if trigger is None:
        return _NeverFireTrigger()
    if isinstance(trigger, (tuple, list)):  # a list: from a YAML or JSON config
        if len(trigger) != 2:
            message = f"a trigger tuple must be (period, unit), got {trigger!r}"
            raise ValueError(message)
        period, unit = trigger
        return IntervalTrigger(period, unit)  # type: ignore[arg-type]
    if callable(trigger):
        return _CallableTrigger(trigger)
    message = (
        "a trigger must be a Trigger, a (period, unit) tuple, a callable or None, "
        f"got {trigger!r} of type {type(trigger).__name__}"
    )
    raise TypeError(message)
