"""MinAccumulate: the minimum of a reported value over an interval."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions.accumulate._base import ExtremumAccumulate

__all__ = ["MinAccumulate"]


class MinAccumulate(ExtremumAccumulate):
    """An extension that reports the minimum of a value over each interval.

    Works as :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate` does, with the
    (element-wise) minimum instead of the mean; a NaN value makes the result NaN.

    Args:
        conversion_key_pair: ``(source, destination)`` keys.
        trigger: When to report the minimum; each epoch by default.
        distributed: The minimum over the values of every process (see
            :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate`).

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.

    Example:
        >>> manager.extend(MinAccumulate(("loss", "epoch/min_loss")))
    """

    largest = False
