"""AverageAccumulate: the mean of a reported value over an interval."""

from __future__ import annotations

from typing import Any

from pytorch_pfn_extras.training.extensions.accumulate._base import AccumulateBase, Number

__all__ = ["AverageAccumulate"]


class AverageAccumulate(AccumulateBase):
    """An extension that reports the mean of a value over each interval.

    It reads ``manager.observation[conversion_key_pair[0]]`` every iteration (with the
    editor priority: after the values of the iteration were reported, before the logs read
    them) and, when ``trigger`` fires, reports the mean of the values seen since the last
    report under ``conversion_key_pair[1]`` and starts again. Tensors are averaged
    element-wise without leaving their device. The partial interval is saved in snapshots.
    Give the reporting trigger to the constructor, not to ``manager.extend``.

    With ``distributed=True``, the reported mean is over the values of every process of the
    default process group (each rank accumulates its own, and the sums are combined when the
    trigger fires, a collective): every rank reports the same global value, which
    ``EarlyStoppingTrigger(monitor=...)`` or ``LRScheduler.step_by_value(...)`` can then use
    so that all ranks take the same decision.

    Args:
        conversion_key_pair: ``(source, destination)`` keys.
        trigger: When to report the mean; each epoch by default.
        distributed: Average over all processes.

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.

    Example:
        >>> manager.extend(AverageAccumulate(("loss", "epoch/loss")))
        >>> manager.extend(LogReport())  # logs "epoch/loss" once per epoch
    """

    def _initial(self) -> dict[str, Number | None]:
        return {"total": 0.0}

    def _update(self, state: dict[str, Any], value: Number, count: int) -> None:
        state["total"] = state["total"] + value

    def _merge(
        self, state: dict[str, Any], count: int, other: dict[str, Any], other_count: int
    ) -> dict[str, Any]:
        return {"total": state["total"] + other["total"]}

    def _compute(self, state: dict[str, Any], count: int) -> Number:
        total: Number = state["total"]
        return total / count
