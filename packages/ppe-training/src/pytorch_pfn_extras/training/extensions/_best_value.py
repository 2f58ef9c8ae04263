"""BestValue, MaxValue and MinValue: track the best value of a reported key."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.training.triggers import BestValueTrigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

# BestValueTrigger's state keys as PPE 0.9 names them inside BestValue's state; the trigger's
# own state dict names them without the underscore ("interval_trigger" is the same in both).
_TRIGGER_KEYS_09 = {"best_value": "_best_value", "summary": "_summary"}
_TRIGGER_KEYS_OURS = {name_09: ours for ours, name_09 in _TRIGGER_KEYS_09.items()}


class BestValue(Extension):
    """Extension that traces the best value of a specific key in the observation.

    It is called every iteration and accumulates the value of ``key``; when ``trigger``
    fires, the mean over the interval is compared with the best mean so far (as a
    :class:`~pytorch_pfn_extras.training.triggers.BestValueTrigger` does) and, if better,
    becomes :attr:`best_value`, with the epoch and iteration it was reached at. The state
    is saved in snapshots, in PPE 0.9's layout (a 0.9 snapshot's state loads).

    Args:
        key: Key of the value, e.g. ``'val/loss'``.
        compare: ``compare(best, new) -> bool``: whether ``new`` is better than ``best``.
        trigger: When to compare; one epoch by default.

    Raises:
        ValueError: ``key`` is not a non-empty string.
        TypeError: ``compare`` is not callable.
        KeyError: At a comparison, when ``key`` was not reported during the interval.

    Example:
        >>> best = extensions.BestValue("val/f1", lambda best, new: new > best)
        >>> manager.extend(best)
        >>> ...  # after training
        >>> best.best_value, best.best_epoch
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER

    def __init__(
        self,
        key: str,
        compare: Callable[[float, float], bool],
        trigger: TriggerLike = (1, "epoch"),
    ) -> None:
        if not isinstance(key, str) or not key:
            message = f"{type(self).__name__}: key must be a non-empty string, got {key!r}"
            raise ValueError(message)
        if not callable(compare):
            message = (
                f"{type(self).__name__}: compare must be callable as compare(best, new), "
                f"got {compare!r}"
            )
            raise TypeError(message)
        self._key = key
        self._best_trigger = BestValueTrigger(key, compare, trigger)
        self._best_epoch: int | None = None
        self._best_iteration: int | None = None

    def _best(self, value: Any) -> Any:
        if value is None:
            message = (
                f"{type(self).__name__}({self._key!r}) has no best value yet: no comparison "
                "has happened (its trigger has not fired)"
            )
            raise RuntimeError(message)
        return value

    @property
    def best_value(self) -> float:
        """The best mean so far.

        Raises:
            RuntimeError: No comparison has happened yet.
        """
        return float(self._best(self._best_trigger.best_value))

    @property
    def best_epoch(self) -> int:
        """The epoch (completed epochs) when :attr:`best_value` was reached."""
        return int(self._best(self._best_epoch))

    @property
    def best_iteration(self) -> int:
        """The iteration when :attr:`best_value` was reached."""
        return int(self._best(self._best_iteration))

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Accumulate the value; at the interval, keep it if it is the best so far."""
        if self._best_trigger(manager):
            self._best_epoch = manager.epoch
            self._best_iteration = manager.iteration

    def state_dict(self) -> dict[str, Any]:
        """Return the best value with its epoch and iteration, and the partial interval.

        The layout is PPE 0.9's: ``{"_best_trigger": {"_best_value", "_summary",
        "interval_trigger"}, "_best_it", "_best_epoch"}``.
        """
        trigger_state = self._best_trigger.state_dict()
        return {
            "_best_trigger": {_TRIGGER_KEYS_09.get(k, k): v for k, v in trigger_state.items()},
            "_best_it": self._best_iteration,
            "_best_epoch": self._best_epoch,
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`, by PPE 0.9's, or by our releases
        before 0.9's layout (``best_trigger``, ``best_epoch``, ``best_iteration``).

        Raises:
            KeyError: ``to_load`` is in neither layout (the message lists its keys).
        """
        if "_best_trigger" in to_load:
            trigger_state = {
                _TRIGGER_KEYS_OURS.get(k, k): v for k, v in to_load["_best_trigger"].items()
            }
            iteration, epoch = to_load["_best_it"], to_load["_best_epoch"]
        elif "best_trigger" in to_load:
            trigger_state = to_load["best_trigger"]
            iteration, epoch = to_load["best_iteration"], to_load["best_epoch"]
        else:
            message = (
                f"{type(self).__name__}({self._key!r}): the state has neither PPE's "
                f"'_best_trigger' nor 'best_trigger'; its keys are {sorted(to_load)}"
            )
            raise KeyError(message)
        self._best_trigger.load_state_dict(trigger_state)
        self._best_iteration = None if iteration is None else int(iteration)
        self._best_epoch = None if epoch is None else int(epoch)


class MaxValue(BestValue):
    """Extension that traces the maximum value of a specific key in the observation.

    Args:
        key: Key of the value, e.g. ``'val/accuracy'``.
        trigger: When to compare; one epoch by default.

    Example:
        >>> manager.extend(extensions.MaxValue("val/accuracy"))
    """

    def __init__(self, key: str, trigger: TriggerLike = (1, "epoch")) -> None:
        super().__init__(key, operator.lt, trigger)


class MinValue(BestValue):
    """Extension that traces the minimum value of a specific key in the observation.

    Args:
        key: Key of the value, e.g. ``'val/loss'``.
        trigger: When to compare; one epoch by default.

    Example:
        >>> manager.extend(extensions.MinValue("val/loss"))
    """

    def __init__(self, key: str, trigger: TriggerLike = (1, "epoch")) -> None:
        super().__init__(key, operator.gt, trigger)
