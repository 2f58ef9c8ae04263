"""MicroAverage: the ratio of two reported sums over an interval."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pytorch_pfn_extras.training._extension import PRIORITY_EDITOR, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

Scalar = float | int | torch.Tensor


def _scalar(value: Any, key: str) -> Scalar:
    """``value`` as a number or a detached one-element tensor (kept on its device)."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return value.detach().reshape(())
    elif isinstance(value, np.ndarray | np.generic):
        if value.size == 1:
            return value.item()  # type: ignore[no-any-return]
    elif isinstance(value, numbers.Real):
        return value  # type: ignore[return-value]
    shape = f" of shape {tuple(value.shape)}" if hasattr(value, "shape") else ""
    message = (
        f"MicroAverage: the value reported under {key!r} must be a scalar (a number or a "
        f"one-element tensor), got {type(value).__name__}{shape}"
    )
    raise ValueError(message)


def _to_python(value: Scalar) -> float | int:
    return value.item() if isinstance(value, torch.Tensor) else value


class MicroAverage(Extension):
    """Calculates the micro-average ratio ``sum(n_i) / sum(d_i)`` over an interval.

    At every iteration where both keys were reported, their values are added to running
    sums (tensors stay on their device: no synchronization); when ``trigger`` fires the
    ratio is reported under ``result_key`` and the sums restart. A typical use is accuracy
    over an epoch: report the number of correct predictions and the batch size per
    iteration. Unlike the mean of per-batch ratios (the macro-average), batches weigh by
    their size. With a zero denominator, the ratio is ``nan`` (``inf`` for tensors with a
    non-zero numerator).

    Args:
        numerator_key: Key of the reported numerator (e.g. the number of correct examples).
        denominator_key: Key of the reported denominator (e.g. the number of examples).
        result_key: Key under which the ratio is reported.
        trigger: When to compute and report the ratio (distinct from the extension's own
            trigger, every iteration); one epoch by default.

    Raises:
        ValueError: A key is not a non-empty string; at a call, a reported value is not a
            scalar.

    Example:
        >>> manager.extend(extensions.MicroAverage("main/correct", "main/total", "main/accuracy"))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_EDITOR

    def __init__(
        self,
        numerator_key: str,
        denominator_key: str,
        result_key: str,
        trigger: TriggerLike = (1, "epoch"),
    ) -> None:
        for what, key in (
            ("numerator_key", numerator_key),
            ("denominator_key", denominator_key),
            ("result_key", result_key),
        ):
            if not isinstance(key, str) or not key:
                message = f"MicroAverage: {what} must be a non-empty string, got {key!r}"
                raise ValueError(message)
        self._numerator_key = numerator_key
        self._denominator_key = denominator_key
        self._result_key = result_key
        self._report_trigger = get_trigger(trigger)
        self._numerator: Scalar = 0
        self._denominator: Scalar = 0
        self._count = 0

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Add this iteration's values; report the ratio when the trigger fires."""
        observation = manager.observation
        if self._numerator_key in observation and self._denominator_key in observation:
            numerator = _scalar(observation[self._numerator_key], self._numerator_key)
            denominator = _scalar(observation[self._denominator_key], self._denominator_key)
            self._numerator = self._numerator + numerator
            self._denominator = self._denominator + denominator
            self._count += 1
        if not self._report_trigger(manager):
            return
        if self._count:
            numerator, denominator = self._numerator, self._denominator
            if isinstance(numerator, torch.Tensor) or isinstance(denominator, torch.Tensor):
                result: Scalar = torch.as_tensor(numerator) / denominator
            else:
                result = numerator / denominator if denominator else math.nan
            manager.reporter.report({self._result_key: result})
        self._numerator = self._denominator = 0
        self._count = 0

    def state_dict(self) -> dict[str, Any]:
        """Return the sums of the partial interval (Python numbers) and the trigger state."""
        return {
            "numerator": _to_python(self._numerator),
            "denominator": _to_python(self._denominator),
            "count": self._count,
            "report_trigger": self._report_trigger.state_dict(),
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self._numerator = to_load["numerator"]
        self._denominator = to_load["denominator"]
        self._count = int(to_load["count"])
        self._report_trigger.load_state_dict(to_load.get("report_trigger", {}))
