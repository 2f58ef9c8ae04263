"""The evaluator engine: runs a handler's evaluation steps over a loader and reports means."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training._engine._evaluation import (
    EvaluationRun,
    OverRanks,
    check_metric,
    eval_mode,
    reporter_of,
    run_metrics,
    sized_length,
)
from pytorch_pfn_extras.training._manager_util import ModelsLike, as_dict

__all__ = ["DistributedEvaluator", "Evaluator", "MetricFn", "sized_length"]

MetricFn = Callable[[Any, Any], Any]
_METRIC = "metric(batch, outputs)"


def _merge(outputs: Any, values: Mapping[str, Any], metric: MetricFn) -> Any:
    """What the engine does with a metric's dict: add it to the outputs (a dict in place)."""
    if isinstance(outputs, dict):
        outputs.update(values)
        return outputs
    if isinstance(outputs, Mapping):
        return {**outputs, **values}
    message = (
        f"the metric {metric!r} returned {sorted(values)}, which are added to the step's "
        f"outputs, but the outputs are a {type(outputs).__name__}, not a dict"
    )
    raise TypeError(message)


class Evaluator:
    """Runs evaluation steps over a loader and reports the means of what they reported.

    Create it with :func:`pytorch_pfn_extras.engine.create_evaluator`; the trainer runs it
    at its trigger, or call :meth:`run` yourself. Each step runs under ``torch.no_grad()``
    with the models in evaluation mode (afterwards each module's mode is restored with
    ``module.train(mode)``, as the Evaluator extension does); the
    values reported during the steps (by the model, or the handler's ``eval_report_keys``)
    are averaged over the whole loader, each batch weighted by its size, so
    that a smaller last batch does not skew the result; the means are then reported to the
    current reporter (the trainer's, when the trainer runs it).

    Args:
        handler: The handler that runs the steps.
        models: A module, or a mapping of names to modules.
        progress_bar: Show the progress of each evaluation on standard output (the line of
            the Evaluator extension, titled ``validation``).
        metrics: Callables ``metric(batch, outputs)`` called after each step; a dict they
            return is added to the step's outputs before the handler's ``eval_post_step``,
            as in PPE, so that ``eval_report_keys`` can name it (e.g.
            :class:`~pytorch_pfn_extras.training.metrics.AccuracyMetric`'s ``"accuracy"``).
        profile: A ``torch.profiler.profile`` stepped after every evaluation step.
    """

    def __init__(
        self,
        handler: Any,
        models: ModelsLike,
        *,
        progress_bar: bool = False,
        metrics: Iterable[MetricFn] | None = None,
        profile: Any = None,
    ) -> None:
        self.handler = handler
        self.models: dict[str, torch.nn.Module] = as_dict(models, "models", torch.nn.Module)
        self._progress_bar = bool(progress_bar)
        self._metrics: list[MetricFn] = []
        for metric in metrics or ():
            self.add_metric(metric)
        self._profile = profile
        self._set_up: object = None
        self._batch: Any = None
        self._completed = False

    @property
    def metrics(self) -> list[MetricFn]:
        """The metrics called after each step."""
        return self._metrics

    def add_metric(self, metric: MetricFn) -> None:
        """Add a metric ``metric(batch, outputs) -> dict | None`` called after each step.

        Raises:
            TypeError: ``metric`` is not callable.
        """
        check_metric(metric, type(self).__name__, _METRIC)
        self._metrics.append(metric)

    def _complete_step(self, batch_idx: int, outputs: Any) -> None:
        self._completed = True
        batch = self._batch
        if self._metrics:
            outputs = run_metrics(self._metrics, (batch, outputs), _merge, "Evaluator")
        self.handler.eval_post_step(self, batch_idx, batch, outputs)

    def run(
        self, loader: Iterable[Any], *, eval_len: int | None = None
    ) -> dict[str, reporting.Statistic]:
        """Evaluate the models on ``loader`` and report the mean of every reported value.

        Args:
            loader: The validation data (a DataLoader or any iterable of batches).
            eval_len: Number of batches to evaluate; ``len(loader)`` by default, and the
                whole loader when it has no length.

        Returns:
            The reported means (what was reported to the current reporter): a 0-d tensor
            for values reported as tensors (no device synchronization), a float otherwise.

        Raises:
            RuntimeError: The handler did not complete a step.
        """
        total = sized_length(loader, eval_len, "eval_len")
        if self._set_up is not loader:
            self.handler.eval_setup(self, loader)
            self._set_up = loader
        title = "validation" if self._shows_progress() else None
        try:
            with (
                EvaluationRun(total, title) as run,
                eval_mode(self.models.values()),
                torch.no_grad(),
            ):
                self.handler.eval_loop_begin(self)
                self._loop(loader, run)
                self.handler.eval_loop_end(self)
        finally:
            self._batch = None
        means = self._summarize(run.summary).compute_mean()
        reporting.report(means)
        return means

    def _shows_progress(self) -> bool:
        """Whether :meth:`run` shows its progress (``progress_bar=True``)."""
        return self._progress_bar

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary whose means :meth:`run` reports: this process's own."""
        return summary

    def _loop(self, loader: Iterable[Any], run: EvaluationRun) -> None:
        handler = self.handler
        # A reporter of its own: the evaluator runs inside a trainer's iteration or alone,
        # and values reported with ``observer=model`` are named as in the trainer.
        reporter = reporter_of(self.models)
        iterator = iter(loader)
        total = run.status.size
        batch_idx = 0
        while total is None or batch_idx < total:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            self._batch = batch
            self._completed = False
            observation: dict[str, Any] = {}
            with reporter.scope(observation):
                handler.eval_step(self, batch_idx, batch, self._complete_step)
            if not self._completed:
                message = (
                    f"{type(handler).__name__}.eval_step() returned without calling "
                    f"complete_fn for batch {batch_idx}; the evaluator completes steps in order"
                )
                raise RuntimeError(message)
            run.add(observation, batch)
            batch_idx += 1
            if self._profile is not None:
                self._profile.step()


class DistributedEvaluator(OverRanks, Evaluator):
    """An :class:`Evaluator` whose means are over the samples of every process.

    Each process evaluates its own share of the validation data (give each rank a loader
    over a :class:`~pytorch_pfn_extras.distributed.DistributedValidationSampler`, so that
    each sample is evaluated exactly once); after the loop, the weighted sums of every
    reported value are added up over the ranks of the default process group, and every
    rank reports the same means: those of one process evaluating the whole data set. The
    reduction is a collective: every rank must run the evaluator at the same iterations
    (the trainer does). Without a process group it is a plain :class:`Evaluator`. The
    reported means are Python floats.

    Create it with ``create_evaluator(..., distributed=True)``.

    Args:
        handler: The handler that runs the steps.
        models: A module, or a mapping of names to modules.
        progress_bar: Show the progress of each evaluation on standard output, on rank 0
            only.
        metrics: Callables ``metric(batch, outputs)`` called after each step.
        profile: A ``torch.profiler.profile`` stepped after every evaluation step.

    Raises:
        RuntimeError: (at :meth:`run`) the job was started as several processes but
            torch.distributed is not initialized.
    """
