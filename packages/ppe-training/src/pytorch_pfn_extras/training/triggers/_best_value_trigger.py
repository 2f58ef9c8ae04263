"""BestValueTrigger and its MaxValueTrigger/MinValueTrigger shorthands."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


def mean_of(summary: DictSummary, key: str, owner: str) -> float:
    """The mean of ``key`` accumulated in ``summary``, as a Python float."""
    means = summary.compute_mean()
    if key not in means:
        message = (
            f"{owner}: the key {key!r} was never reported during the interval; "
            "check the key name and that the value is reported before this trigger fires"
        )
        raise KeyError(message)
    return float(means[key])


class BestValueTrigger(Trigger):
    """Trigger invoked when a reported value becomes the best so far.

    At every iteration the value of ``key`` (when reported) is accumulated; when
    ``trigger`` fires, the mean of the interval is compared with the best mean seen so far
    and the trigger fires if it is better (the first interval always is). Its state (best
    value, partial interval) is saved, so a resumed run fires exactly where the
    uninterrupted run does.

    Args:
        key: Key of the reported value, e.g. ``'val/loss'``.
        compare: ``compare(best, new) -> bool``: whether ``new`` is better than ``best``.
        trigger: When to compare; one epoch by default.

    Raises:
        KeyError: At a comparison, when ``key`` was not reported during the interval.

    Example:
        >>> trigger = BestValueTrigger("val/f1", lambda best, new: new > best)
    """

    def __init__(
        self,
        key: str,
        compare: Callable[[float, float], bool],
        trigger: TriggerLike = (1, "epoch"),
    ) -> None:
        self._key = key
        self._compare = compare
        self._interval_trigger = get_trigger(trigger)
        self._best_value: float | None = None
        self._summary = DictSummary()

    @property
    def best_value(self) -> float | None:
        """The best mean so far (``None`` before the first comparison)."""
        return self._best_value

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Accumulate the value; at the interval, fire if the mean is the best so far."""
        observation = manager.observation
        key = self._key
        if key in observation:
            self._summary.add({key: observation[key]})
        if not self._interval_trigger(manager):
            return False
        value = mean_of(self._summary, key, type(self).__name__)
        self._summary = DictSummary()
        if self._best_value is None or self._compare(self._best_value, value):
            self._best_value = value
            return True
        return False

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        """Return whether a comparison may happen at ``iteration``."""
        return self._interval_trigger.may_fire(iteration, epoch_length)

    def state_dict(self) -> dict[str, Any]:
        """Return the best value, the partial interval and the interval trigger's state."""
        return {
            "best_value": self._best_value,
            "summary": self._summary.state_dict(),
            "interval_trigger": self._interval_trigger.state_dict(),
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        best = to_load["best_value"]
        self._best_value = None if best is None else float(best)
        self._summary = DictSummary()
        self._summary.load_state_dict(to_load["summary"])
        self._interval_trigger.load_state_dict(to_load.get("interval_trigger", {}))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._key!r}, trigger={self._interval_trigger!r})"


class MaxValueTrigger(BestValueTrigger):
    """Trigger invoked when a reported value becomes the maximum so far.

    Args:
        key: Key of the reported value, e.g. ``'val/accuracy'``.
        trigger: When to compare; one epoch by default.

    Example:
        >>> manager.extend(extensions.snapshot(), trigger=MaxValueTrigger("val/accuracy"))
    """

    def __init__(self, key: str, trigger: TriggerLike = (1, "epoch")) -> None:
        super().__init__(key, operator.lt, trigger)


class MinValueTrigger(BestValueTrigger):
    """Trigger invoked when a reported value becomes the minimum so far.

    Args:
        key: Key of the reported value, e.g. ``'val/loss'``.
        trigger: When to compare; one epoch by default.

    Example:
        >>> manager.extend(extensions.snapshot(), trigger=MinValueTrigger("val/loss"))
    """

    def __init__(self, key: str, trigger: TriggerLike = (1, "epoch")) -> None:
        super().__init__(key, operator.gt, trigger)
