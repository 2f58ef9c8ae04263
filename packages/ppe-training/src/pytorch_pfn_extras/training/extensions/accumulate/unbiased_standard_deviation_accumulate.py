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
        distributed: Reduce over all processes (not implemented yet: raises).

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.
        NotImplementedError: ``distributed=True``.

    Example:
        >>> manager.extend(UnbiasedStandardDeviationAccumulate(("loss", "epoch/loss_std")))
    """

    ddof = 1
