"""The trigger base class, for the triggers and for :func:`get_trigger` built on it."""

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
