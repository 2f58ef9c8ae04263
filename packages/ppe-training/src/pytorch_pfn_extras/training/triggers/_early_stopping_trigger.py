"""EarlyStoppingTrigger: ends training when a monitored value stops improving."""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._interval_trigger import IntervalTrigger
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, UnitLiteral, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

_MODES = ("auto", "max", "min")


class EarlyStoppingTrigger(Trigger):
    """Trigger for early stopping; use it as the manager's ``stop_trigger``.

    Within each check interval (``check_trigger``) the value of ``monitor`` is accumulated
    at every iteration where it is reported. At the end of the interval its mean is
    compared with the best mean so far; after ``patience`` successive checks without
    improvement the trigger fires. It also fires when ``max_trigger`` does (the upper bound
    of training). Everything it tracks (best value, patience count, partial interval) is
    saved by :meth:`state_dict`, so a resumed run stops exactly where the uninterrupted run
    stops.

    Args:
        check_trigger: When to compare; one epoch by default.
        monitor: Key of the reported value to monitor.
        patience: Number of successive checks without improvement that stop training.
        mode: ``'max'``, ``'min'`` or ``'auto'`` (``'max'`` when the last component of
            ``monitor`` contains ``'acc'``, e.g. ``'val/accuracy'``, else ``'min'``).
        verbose: Print a line when training is stopped early.
        max_trigger: Upper bound of training, a ``(period, unit)`` tuple.

    Raises:
        ValueError: ``mode`` is unknown or ``patience`` is not a positive integer.

    Example:
        >>> stop = EarlyStoppingTrigger(monitor="val/loss", patience=5)
        >>> manager = ExtensionsManager(model, optimizer, 100, iters_per_epoch=len(loader),
        ...                             stop_trigger=stop)
    """

    def __init__(
        self,
        check_trigger: TriggerLike = (1, "epoch"),
        monitor: str = "main/loss",
        patience: int = 3,
        mode: str = "auto",
        verbose: bool = False,
        max_trigger: tuple[int, UnitLiteral] = (100, "epoch"),
    ) -> None:
        if mode not in _MODES:
            message = f"EarlyStoppingTrigger: mode must be 'auto', 'max' or 'min', got {mode!r}"
            raise ValueError(message)
        if not is_int(patience) or patience < 1:
            message = f"EarlyStoppingTrigger: patience must be an integer >= 1, got {patience!r}"
            raise ValueError(message)
        if mode == "auto":
            mode = "max" if "acc" in monitor.rsplit("/", 1)[-1] else "min"
        self.monitor = monitor
        self.patience = patience
        self.mode = mode
        self.verbose = verbose
        self._better = operator.gt if mode == "max" else operator.lt
        self._interval_trigger = get_trigger(check_trigger)
        self._max_trigger = IntervalTrigger(*max_trigger)
        self._summary = DictSummary()
        self._best: float | None = None
        self._count = 0
        self._warned = False

    @property
    def best(self) -> float | None:
        """The best mean of ``monitor`` so far."""
        return self._best

    @property
    def count(self) -> int:
        """Successive checks without improvement."""
        return self._count

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Accumulate the monitored value; return whether training must stop."""
        observation = manager.observation
        monitor = self.monitor
        if monitor in observation:
            self._summary.add({monitor: observation[monitor]})
        if self._max_trigger(manager):
            return True
        if not self._interval_trigger(manager):
            return False
        means = self._summary.compute_mean()
        self._summary = DictSummary()
        if monitor not in means:
            if not self._warned:
                self._warned = True
                message = (
                    f"EarlyStoppingTrigger: {monitor!r} was not reported during the check "
                    f"interval ending at iteration {manager.iteration}; early stopping cannot "
                    "judge this interval"
                )
                warnings.warn(message, UserWarning, stacklevel=2)
            return False
        value = float(means[monitor])
        if self._best is None or self._better(value, self._best):
            self._best = value
            self._count = 0
        else:
            self._count += 1
        if self._count >= self.patience:
            if self.verbose:
                print(
                    f"Early stopping at epoch {manager.epoch}, iteration {manager.iteration}: "
                    f"{monitor} has not improved for {self._count} checks (best {self._best})"
                )
            return True
        return False

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        """Return whether a check (or the end of training) may happen at ``iteration``."""
        return self._max_trigger.may_fire(
            iteration, epoch_length
        ) or self._interval_trigger.may_fire(iteration, epoch_length)

    def get_training_length(self) -> tuple[float, UnitLiteral]:
        """Return the upper bound of training, ``max_trigger``."""
        return self._max_trigger.get_training_length()

    def state_dict(self) -> dict[str, Any]:
        """Return the best value, patience count, partial interval and sub-trigger states."""
        return {
            "best": self._best,
            "count": self._count,
            "summary": self._summary.state_dict(),
            "interval_trigger": self._interval_trigger.state_dict(),
            "max_trigger": self._max_trigger.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        best = state["best"]
        self._best = None if best is None else float(best)
        self._count = int(state["count"])
        self._summary = DictSummary()
        self._summary.load_state_dict(state["summary"])
        self._interval_trigger.load_state_dict(state.get("interval_trigger", {}))
        self._max_trigger.load_state_dict(state.get("max_trigger", {}))

    def __repr__(self) -> str:
        return (
            f"EarlyStoppingTrigger(check_trigger={self._interval_trigger!r}, "
            f"monitor={self.monitor!r}, patience={self.patience!r}, mode={self.mode!r}, "
            f"max_trigger={self._max_trigger!r})"
        )
