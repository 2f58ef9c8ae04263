"""MaxAccumulate: the maximum of a reported value over an interval."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions.accumulate._base import ExtremumAccumulate

__all__ = ["MaxAccumulate"]


class MaxAccumulate(ExtremumAccumulate):
    """An extension that reports the maximum of a value over each interval.

    Works as :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate` does, with the
    (element-wise) maximum instead of the mean; a NaN value makes the result NaN.

    Args:
        conversion_key_pair: ``(source, destination)`` keys.
        trigger: When to report the maximum; each epoch by default.
        distributed: The maximum over the values of every process (see
            :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate`).

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.

    Example:
        >>> manager.extend(MaxAccumulate(("grad_norm", "epoch/max_grad_norm")))
    """

    largest = True
