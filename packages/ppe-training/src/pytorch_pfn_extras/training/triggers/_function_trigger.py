"""FunctionTrigger: asks a function, on an interval."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class FunctionTrigger(Trigger):
    """Trigger that fires when ``fn(*args, **kwargs)`` returns true.

    The function is called only when ``trigger`` fires, so an expensive check (reading a
    file, asking a scheduler) runs at the interval you choose.

    Args:
        fn: The function; its result is converted with ``bool``.
        args: Positional arguments for ``fn``.
        kwargs: Keyword arguments for ``fn``.
        trigger: When to call ``fn``; every iteration by default.

    Example:
        >>> stop = FunctionTrigger(os.path.exists, ["STOP"], trigger=(10, "iteration"))
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        trigger: TriggerLike = (1, "iteration"),
    ) -> None:
        if not callable(fn):
            message = f"FunctionTrigger: fn must be callable, got {fn!r}"
            raise TypeError(message)
        self._fn = fn
        self._args = tuple(args) if args is not None else ()
        self._kwargs = dict(kwargs) if kwargs is not None else {}
        self._interval_trigger = get_trigger(trigger)

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Call ``fn`` when the interval trigger fires and return its result."""
        if not self._interval_trigger(manager):
            return False
        return bool(self._fn(*self._args, **self._kwargs))

    def may_fire(self, iteration: int, epoch_len: int) -> bool:
        """Return whether the interval trigger may fire at ``iteration``."""
        return self._interval_trigger.may_fire(iteration, epoch_len)

    def state_dict(self) -> dict[str, Any]:
        """Return the interval trigger's state."""
        return {"interval_trigger": self._interval_trigger.state_dict()}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore the interval trigger's state."""
        self._interval_trigger.load_state_dict(to_load.get("interval_trigger", {}))

    def __repr__(self) -> str:
        return f"FunctionTrigger({self._fn!r}, trigger={self._interval_trigger!r})"
