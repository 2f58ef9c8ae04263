"""Metrics for the evaluator engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class AccuracyMetric:
    """Classification accuracy of a batch, as the step output ``"accuracy"``.

    Pass it to :func:`pytorch_pfn_extras.engine.create_evaluator` (``metrics=[...]``) and
    name ``"accuracy"`` in its ``eval_report_keys`` option to report it as ``val/accuracy``,
    as in PPE. The output may hold class scores (one more dimension than the labels: the
    class is the argmax over dimension 1), predicted labels of the labels' shape, or of
    that shape with a dimension 1 of size one (``argmax(dim=1, keepdim=True)``). The value is
    a 0-d tensor on the outputs' device, where PPE 0.9 returns a Python float: an
    evaluation step does not wait for the device (the log shows a float either way). The
    evaluator averages it over the whole validation set, weighted by batch size, which gives
    the exact overall accuracy.

    Args:
        label_key: The batch entry holding the labels.
        output_key: The model output holding the scores or predicted labels.

    Example:
        >>> evaluator = ppe.engine.create_evaluator(
        ...     model, metrics=[ppe.training.metrics.AccuracyMetric("t", "y")],
        ...     options={"eval_report_keys": ["loss", "accuracy"]})
    """

    def __init__(self, label_key: str, output_key: str) -> None:
        self.label_key = label_key
        self.output_key = output_key

    def __call__(self, batch: Any, out: Any) -> dict[str, torch.Tensor]:
        """Return ``{"accuracy": fraction of correct predictions in the batch}``.

        Raises:
            KeyError: The batch or the outputs lack the configured key.
            ValueError: The shapes of the outputs and labels do not fit.
        """
        labels = _entry(batch, self.label_key, "batch", "label_key")
        pred = _entry(out, self.output_key, "outputs", "output_key")
        if pred.dim() == labels.dim() + 1:
            pred = pred.squeeze(1) if pred.shape[1] == 1 else pred.argmax(dim=1)
        if pred.shape != labels.shape:
            message = (
                f"AccuracyMetric: outputs[{self.output_key!r}] of shape {tuple(pred.shape)} do "
                f"not match the labels batch[{self.label_key!r}] of shape {tuple(labels.shape)}"
            )
            raise ValueError(message)
        if labels.device != pred.device:  # the loader's batch, the outputs on the device
            labels = labels.to(pred.device, non_blocking=True)  # no wait for the device
        return {"accuracy": (pred == labels).float().mean()}


def _entry(container: Any, key: str, what: str, argument: str) -> torch.Tensor:
    if not isinstance(container, Mapping) or key not in container:
        keys = list(container) if isinstance(container, Mapping) else type(container).__name__
        message = f"AccuracyMetric({argument}={key!r}): the {what} have no such entry ({keys})"
        raise KeyError(message)
    value = container[key]
    if not isinstance(value, torch.Tensor):
        message = f"AccuracyMetric: {what}[{key!r}] must be a tensor, got {type(value).__name__}"
        raise TypeError(message)
    return value
