"""The trigger base class and :func:`get_trigger`."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

UnitLiteral: TypeAlias = Literal["iteration", "epoch"]


class Trigger(abc.ABC):
    """Decides, once per iteration, whether something (an extension, the end) happens.

    A trigger is called with the manager after every iteration and returns ``True`` to fire.
    Stateful triggers save everything they need through :meth:`state_dict` so that a resumed
    run fires exactly where the uninterrupted run would have; the state may contain only
    numbers, strings, ``None``, tensors and lists/dicts of those (it is loaded with
    ``torch.load(..., weights_only=True)``).
    """

    @abc.abstractmethod
    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Return whether the trigger fires after the manager's current iteration."""

    def may_fire(self, iteration: int, epoch_len: int) -> bool:
        """Return whether the trigger may fire at ``iteration`` (no side effect).

        The manager calls it positionally, so an override may name its parameters as it likes
        (most of PPE's built-in triggers use ``epoch_length``).

        Args:
            iteration: The iteration count to ask about.
            epoch_len: Iterations per epoch.

        Returns:
            ``False`` only when the trigger certainly does not fire there; used to know
            in advance whether an extension needing the model state will run.
        """
        return True

    def state_dict(self) -> dict[str, Any]:
        """Return the trigger's state (empty for stateless triggers)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027
        """Restore a state returned by :meth:`state_dict`.

        Args:
            state: The state; called positionally, so an override may name it ``to_load``
                (as most of PPE's built-in triggers do).
        """


TriggerLike: TypeAlias = (
    Trigger | Callable[["ExtensionsManagerProtocol"], bool] | tuple[float, str] | list[Any] | None
)


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
        from pytorch_pfn_extras.training.triggers import IntervalTrigger

        period, unit = trigger
        return IntervalTrigger(period, unit)  # type: ignore[arg-type]
    if callable(trigger):
        return _CallableTrigger(trigger)
    message = (
        "a trigger must be a Trigger, a (period, unit) tuple, a callable or None, "
        f"got {trigger!r} of type {type(trigger).__name__}"
    )
    raise TypeError(message)
