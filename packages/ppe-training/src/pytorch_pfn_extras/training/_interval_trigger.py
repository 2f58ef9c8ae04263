"""IntervalTrigger: fires every ``period`` iterations or epochs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytorch_pfn_extras.training._trigger_base import Trigger, UnitLiteral
from pytorch_pfn_extras.training._trigger_checks import (
    as_number,
    check_epoch_length,
    check_unit,
    exact_fraction,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class IntervalTrigger(Trigger):
    """Trigger based on a fixed interval.

    Fires after every ``period`` iterations, or every ``period`` epochs. A fractional number
    of epochs is allowed: the trigger fires at the first iteration at which
    ``epoch_detail`` reaches the next multiple of ``period`` (computed exactly, so ``0.1``
    epoch means one tenth of an epoch, not a binary float).

    The trigger is stateless: whether it fires depends only on the iteration count, so a
    resumed run fires exactly where the uninterrupted run fires. Evaluating it is O(1).

    Args:
        period: Length of the interval; a positive integer when ``unit`` is ``'iteration'``.
        unit: ``'iteration'`` or ``'epoch'``.

    Raises:
        ValueError: ``unit`` is unknown, ``period`` is not positive, or ``period`` is not an
            integer although ``unit`` is ``'iteration'``.

    Example:
        >>> manager.extend(extensions.LogReport(), trigger=IntervalTrigger(100, "iteration"))
    """

    def __init__(self, period: float, unit: UnitLiteral) -> None:
        check_unit(unit, "IntervalTrigger")
        as_number(period, "period", "IntervalTrigger")
        if period <= 0:
            message = f"IntervalTrigger: period must be positive, got {period!r}"
            raise ValueError(message)
        if unit == "iteration" and int(period) != period:
            message = f"IntervalTrigger: a period in iterations must be an integer, got {period!r}"
            raise ValueError(message)
        self.period = period
        self.unit: UnitLiteral = unit
        fraction = exact_fraction(period)
        self._numerator = fraction.numerator
        self._denominator = fraction.denominator
        self._iteration_period = int(period) if unit == "iteration" else 0
        self._cached_epoch_length = -1
        self._cached_span = 0

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Return whether the manager's current iteration ends an interval."""
        iteration = manager.iteration
        if self._iteration_period:
            return iteration > 0 and iteration % self._iteration_period == 0
        return self.may_fire(iteration, manager.iters_per_epoch)

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        """Return whether the trigger fires at ``iteration`` (exact, O(1))."""
        if iteration <= 0:
            return False
        if self._iteration_period:
            return iteration % self._iteration_period == 0
        if epoch_length != self._cached_epoch_length:
            check_epoch_length(epoch_length)
            self._cached_epoch_length = epoch_length
            self._cached_span = self._numerator * epoch_length
        # The interval is ``span / denominator`` iterations: fire when
        # floor(iteration / interval) increases.
        span, den = self._cached_span, self._denominator
        if den == 1:
            return iteration % span == 0
        return (iteration * den) // span != ((iteration - 1) * den) // span

    def get_training_length(self) -> tuple[float, UnitLiteral]:
        """Return ``(period, unit)``, the length of training when used as a stop trigger."""
        return self.period, self.unit

    def __repr__(self) -> str:
        return f"IntervalTrigger({self.period!r}, {self.unit!r})"
