"""TimeTrigger: fires every ``period`` seconds of training."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._trigger_checks import as_number
from pytorch_pfn_extras.training._trigger_util import Trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class TimeTrigger(Trigger):
    """Trigger based on a fixed time interval.

    Fires at the first iteration ending after each multiple of ``period`` seconds of
    training time (``manager.elapsed_time``, which continues across resumes).

    Args:
        period: Interval in seconds; must be positive.

    Raises:
        ValueError: ``period`` is not positive.

    Example:
        >>> manager.extend(extensions.snapshot(), trigger=TimeTrigger(3600))
    """

    def __init__(self, period: float) -> None:
        as_number(period, "period", "TimeTrigger")
        if period <= 0:
            message = f"TimeTrigger: period must be positive, got {period!r}"
            raise ValueError(message)
        self._period = float(period)
        self._next_time = self._period

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Return whether the next multiple of ``period`` seconds has passed."""
        elapsed = manager.elapsed_time
        if elapsed < self._next_time:
            return False
        # Skip the multiples already passed: one fire per crossing, never a burst.
        periods = int(elapsed // self._period) + 1
        self._next_time = periods * self._period
        return True

    def state_dict(self) -> dict[str, Any]:
        """Return ``{'next_time': float}``."""
        return {"next_time": self._next_time}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore the time of the next fire."""
        self._next_time = float(to_load["next_time"])

    def __repr__(self) -> str:
        return f"TimeTrigger({self._period!r})"
