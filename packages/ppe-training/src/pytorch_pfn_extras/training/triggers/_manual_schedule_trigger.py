"""ManualScheduleTrigger: fires at given iterations or epochs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._trigger_checks import (
    as_number,
    check_epoch_length,
    check_unit,
    exact_fraction,
    iteration_of_epoch_point,
)
from pytorch_pfn_extras.training._trigger_util import Trigger, UnitLiteral

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class ManualScheduleTrigger(Trigger):
    """Trigger invoked at specified point(s) of iterations or epochs.

    With ``unit='epoch'`` a fractional point fires at the first iteration at which
    ``epoch_detail`` reaches it. Firing depends only on the iteration count, so it is exact
    across resumes; a lookup is O(1).

    Args:
        points: A point or a sequence of points; integers when ``unit`` is ``'iteration'``.
            Points must be positive.
        unit: ``'iteration'`` or ``'epoch'``.

    Raises:
        ValueError: ``unit`` is unknown, there are no points, a point is not positive, or an
            iteration point is not an integer.

    Attributes:
        finished: Whether every point has passed (the trigger will not fire again).

    Example:
        >>> trigger = ManualScheduleTrigger([10, 20, 50], "epoch")
    """

    def __init__(self, points: float | Sequence[float], unit: UnitLiteral) -> None:
        check_unit(unit, "ManualScheduleTrigger")
        point_list = list(points) if isinstance(points, Sequence) else [points]
        if not point_list:
            message = "ManualScheduleTrigger: points must not be empty"
            raise ValueError(message)
        for point in point_list:
            as_number(point, "a point", "ManualScheduleTrigger")
            if point <= 0:
                message = f"ManualScheduleTrigger: points must be positive, got {point!r}"
                raise ValueError(message)
            if unit == "iteration" and int(point) != point:
                message = (
                    f"ManualScheduleTrigger: points in iterations must be integers, got {point!r}"
                )
                raise ValueError(message)
        self.points = point_list
        self.unit: UnitLiteral = unit
        self.finished = False
        self._fractions = [exact_fraction(p) for p in point_list]
        self._cached_epoch_length = -1
        self._iterations: frozenset[int] = frozenset()
        self._last = 0
        if unit == "iteration":
            self._set_iterations([int(p) for p in point_list])

    def _set_iterations(self, iterations: list[int]) -> None:
        self._iterations = frozenset(iterations)
        self._last = max(iterations)

    def _resolve(self, epoch_length: int) -> None:
        if self.unit == "epoch" and epoch_length != self._cached_epoch_length:
            check_epoch_length(epoch_length)
            self._cached_epoch_length = epoch_length
            self._set_iterations(
                [iteration_of_epoch_point(p, epoch_length) for p in self._fractions]
            )

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Return whether the manager's current iteration is one of the points."""
        iteration = manager.iteration
        self._resolve(manager.iters_per_epoch)
        if iteration >= self._last:
            self.finished = True
        return iteration in self._iterations

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        """Return whether ``iteration`` is one of the points."""
        self._resolve(epoch_length)
        return iteration in self._iterations

    def state_dict(self) -> dict[str, Any]:
        """Return ``{'finished': bool}``."""
        return {"finished": self.finished}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the ``finished`` flag."""
        self.finished = bool(state.get("finished", False))

    def __repr__(self) -> str:
        return f"ManualScheduleTrigger({self.points!r}, {self.unit!r})"
