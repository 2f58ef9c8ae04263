"""StandardDeviationAccumulate: the population standard deviation over an interval."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions.accumulate._base import MomentsAccumulate

__all__ = ["StandardDeviationAccumulate"]


class StandardDeviationAccumulate(MomentsAccumulate):
    """An extension that reports the standard deviation of a value over each interval.

    Works as :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate` does; the
    result is the population standard deviation (``numpy.std(values)``, ``ddof=0``),
    element-wise for tensors, computed with Welford's numerically stable update.

    Args:
        conversion_key_pair: ``(source, destination)`` keys.
        trigger: When to report the standard deviation; each epoch by default.
        distributed: The standard deviation over the values of every process (see
            :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate`).

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.

    Example:
        >>> manager.extend(StandardDeviationAccumulate(("loss", "epoch/loss_std")))
    """

    ddof = 0
