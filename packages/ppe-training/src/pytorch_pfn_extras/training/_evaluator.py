"""The evaluator engine: runs a handler's evaluation steps over a loader and reports means."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.distributed._collective import rank, reduce_summary
from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._batch import batch_size_of, weighted
from pytorch_pfn_extras.training._manager_util import ModelsLike, as_dict

MetricFn = Callable[[Any, Any], Any]


def sized_length(loader: Any, given: int | None, argument: str) -> int | None:
    """Return ``given`` (checked) or ``len(loader)``; ``None`` when neither is known."""
    if given is not None:
        if not is_int(given) or given < 0:
            message = f"{argument} must be a non-negative integer, got {given!r}"
            raise ValueError(message)
        return given
    try:
        return len(loader)
    except TypeError:
        return None


class _Progress:
    """A one-line progress display for evaluations (``progress_bar=True``)."""

    def __init__(self, total: int | None, out: TextIO, width: int = 30) -> None:
        self._total = total
        self._out = out
        self._width = width
        self._every = max(1, (total or 0) // 50)

    def update(self, done: int) -> None:
        if done % self._every and done != self._total:
            return
        if self._total:
            filled = self._width * done // self._total
            bar = "#" * filled + "." * (self._width - filled)
            text = f"\rvalidation [{bar}] {done}/{self._total} ({100 * done // self._total}%)"
        else:
            text = f"\rvalidation: {done} batches"
        self._out.write(text)
        self._out.flush()

    def close(self) -> None:
        self._out.write("\n")
        self._out.flush()


def _merge(outputs: Any, values: Any, metric: MetricFn) -> Any:
    """``outputs`` with a metric's results added, as PPE does (a dict is updated in place)."""
    if not isinstance(values, Mapping):
        message = (
            f"a metric must return a dict or None, got {type(values).__name__} from {metric!r}"
        )
        raise TypeError(message)
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
    with the models in evaluation mode (their previous mode is restored afterwards); the
    values reported during the steps (by the model, or the handler's ``eval_report_keys``)
    are averaged over the whole loader, each batch weighted by its size, so
    that a smaller last batch does not skew the result; the means are then reported to the
    current reporter (the trainer's, when the trainer runs it).

    Args:
        handler: The handler that runs the steps.
        models: A module, or a mapping of names to modules.
        progress_bar: Show the progress of each evaluation on standard output.
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
        if not callable(metric):
            message = f"a metric must be callable as metric(batch, outputs), got {metric!r}"
            raise TypeError(message)
        self._metrics.append(metric)

    def _complete_step(self, batch_idx: int, outputs: Any) -> None:
        self._completed = True
        batch = self._batch
        for metric in self._metrics:
            values = metric(batch, outputs)
            if values is not None:
                outputs = _merge(outputs, values, metric)
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
        summary = reporting.DictSummary()
        modes = [
            (module, module.training)
            for model in self.models.values()
            for module in model.modules()
        ]
        for model in self.models.values():
            model.eval()
        progress = _Progress(total, sys.stdout) if self._shows_progress() else None
        try:
            with torch.no_grad():
                self.handler.eval_loop_begin(self)
                self._loop(loader, total, summary, progress)
                self.handler.eval_loop_end(self)
        finally:
            self._batch = None
            for module, training in modes:
                module.training = training
            if progress is not None:
                progress.close()
        means = self._summarize(summary).compute_mean()
        reporting.report(means)
        return means

    def _shows_progress(self) -> bool:
        """Whether :meth:`run` shows its progress (``progress_bar=True``)."""
        return self._progress_bar

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary whose means :meth:`run` reports: this process's own."""
        return summary

    def _loop(
        self,
        loader: Iterable[Any],
        total: int | None,
        summary: reporting.DictSummary,
        progress: _Progress | None,
    ) -> None:
        handler = self.handler
        # A reporter of its own: the evaluator runs inside a trainer's iteration or alone,
        # and values reported with ``observer=model`` are named as in the trainer.
        reporter = reporting.Reporter()
        for name, model in self.models.items():
            reporter.add_observer(name, model)
            reporter.add_observers(
                name + "/", [(sub, module) for sub, module in model.named_modules() if sub]
            )
        iterator = iter(loader)
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
            if observation:
                summary.add(weighted(observation, batch_size_of(batch)))
            batch_idx += 1
            if progress is not None:
                progress.update(batch_idx)
            if self._profile is not None:
                self._profile.step()


class DistributedEvaluator(Evaluator):
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

    def _shows_progress(self) -> bool:
        """Rank 0 alone shows the progress (every rank evaluates at the same pace)."""
        return self._progress_bar and rank() == 0

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary of every rank's values (a collective)."""
        return reduce_summary(summary, "DistributedEvaluator")
