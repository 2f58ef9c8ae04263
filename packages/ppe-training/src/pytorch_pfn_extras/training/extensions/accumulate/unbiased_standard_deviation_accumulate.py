"""UnbiasedStandardDeviationAccumulate: the sample standard deviation over an interval."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions.accumulate._base import MomentsAccumulate

__all__ = ["UnbiasedStandardDeviationAccumulate"]


class UnbiasedStandardDeviationAccumulate(MomentsAccumulate):
    """An extension that reports the unbiased standard deviation of a value over each interval.

    Works as :class:`~pytorch_pfn_extras.training.extensions.StandardDeviationAccumulate`
    does, with Bessel's correction (``numpy.std(values, ddof=1)``): an interval with a single
    value reports NaN.

    Args:
        conversion_key_pair: ``(source, destination)`` keys.
        trigger: When to report the standard deviation; each epoch by default.
        distributed: The standard deviation over the values of every process (see
            :class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate`).

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.

    Example:
        >>> manager.extend(UnbiasedStandardDeviationAccumulate(("loss", "epoch/loss_std")))
    """

    ddof = 1
