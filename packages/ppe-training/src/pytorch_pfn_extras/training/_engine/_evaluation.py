"""What both evaluators share: eval mode, metrics, the weighted means and the progress line.

The engine's :class:`pytorch_pfn_extras.training.Evaluator` (``ppe.engine.create_evaluator``)
and the :class:`~pytorch_pfn_extras.training.extensions.Evaluator` extension (and its Ignite
and distributed variants) differ in how a batch is evaluated; what happens around it is here,
once: the models in eval mode and back (:func:`eval_mode`), the reporter naming them
(:func:`reporter_of`), the metrics called after each step (:func:`run_metrics`), the reports
of each batch weighted by its size and the progress line drawn by
:class:`~pytorch_pfn_extras.training.extensions.util.ProgressBar` (:class:`EvaluationRun`),
and what makes each a DistributedEvaluator (:class:`OverRanks`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, TypeVar

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.distributed._collective import rank, reduce_summary
from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._batch import batch_size_of, weighted
from pytorch_pfn_extras.training._engine._progress import ProgressBar
from pytorch_pfn_extras.training._engine._progress import bar as _bar

# Seconds between two redraws of the progress line (the first and the last are always drawn).
_REDRAW_TTY = 0.1
_REDRAW_FILE = 5.0
_BAR_LENGTH = 30

_T = TypeVar("_T")


def sized_length(loader: Any, given: int | None, argument: str) -> int | None:
    """Return ``given`` (checked) or ``len(loader)``; ``None`` when neither is known.

    Raises:
        ValueError: ``given`` is not a non-negative integer (``argument`` names it).
    """
    if given is not None:
        if not is_int(given) or given < 0:
            message = f"{argument} must be a non-negative integer, got {given!r}"
            raise ValueError(message)
        return given
    try:
        return len(loader)
    except TypeError:  # no __len__ (a generator, an IterableDataset's loader)
        return None


@contextlib.contextmanager
def eval_mode(models: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Put ``models`` in eval mode; give every submodule its own mode back on exit.

    The ``training`` flag of every module is recorded, then ``model.eval()`` is called. On
    exit, also when the block raises, the modes are restored with ``train(mode)``: one
    ``model.train(mode)`` when all the modules of a model had the same mode, else one call
    per module, parents first (so a frozen BatchNorm in a training model stays frozen).
    """
    saved = [(model, [(m, m.training) for m in model.modules()]) for model in models]
    for model, _ in saved:
        model.eval()
    try:
        yield
    finally:
        for model, modes in saved:
            first = modes[0][1]  # the model's own
            if all(mode == first for _, mode in modes):
                model.train(first)
            else:
                for module, mode in modes:
                    module.train(mode)


def reporter_of(models: Mapping[str, torch.nn.Module], prefix: str = "") -> reporting.Reporter:
    """A reporter on which each model is the observer ``prefix + name``.

    Its submodules are ``prefix + name + "/" + submodule``, so that values reported with
    ``observer=model`` are named as during training.
    """
    reporter = reporting.Reporter()
    for name, model in models.items():
        reporter.add_observer(prefix + name, model)
        reporter.add_observers(
            prefix + name + "/", [(sub, module) for sub, module in model.named_modules() if sub]
        )
    return reporter


def check_metric(metric: object, owner: str, signature: str) -> None:
    """Raise a TypeError naming ``signature`` unless ``metric`` is callable."""
    if not callable(metric):
        message = f"{owner}: a metric must be a callable {signature}, got {metric!r}"
        raise TypeError(message)


Add = Callable[[Any, Mapping[str, Any], Callable[..., Any]], Any]
"""``add(outputs, values, metric) -> outputs``: what is done with a metric's dict."""


def run_metrics(
    metrics: Iterable[Callable[..., Any]], args: tuple[Any, ...], add: Add, owner: str
) -> Any:
    """Call each ``metric(*args)``; hand each dict it returns to ``add``.

    ``args`` is ``(batch, outputs, ...)``; ``add(outputs, values, metric)`` returns the
    outputs the next metrics see (the engine merges the values into them; the extension
    reports the values and keeps the outputs). It is called after each step of an
    evaluation: arguments by position, no more work than the loop itself.

    Returns:
        The outputs after the last metric.

    Raises:
        TypeError: A metric returned something other than ``None`` or a dict.
    """
    for metric in metrics:
        values = metric(*args)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            message = (
                f"{owner}: the metric {metric!r} returned a {type(values).__name__}; a metric "
                "returns None or a dict of values"
            )
            raise TypeError(message)
        outputs = add(args[1], values, metric)
        if outputs is not args[1]:  # not updated in place
            args = (args[0], outputs, *args[2:])
    return args[1]


class IterationStatus:
    """Progress of an evaluation: how many batches were evaluated, out of how many.

    Attributes:
        size: Number of batches of the evaluation; ``None`` when the iterator has no
            ``len()``.
        current_position: Number of batches evaluated so far.
        is_last: Whether the batch being evaluated is the last one.

    Example:
        >>> status = IterationStatus(4)
        >>> status.current_position = 1
        >>> status.epoch_detail
        0.25
    """

    def __init__(self, size: int | None) -> None:
        self.size = size
        self.current_position = 0
        self.is_last = False

    @property
    def epoch_detail(self) -> float | None:
        """Fraction of the evaluation done; ``None`` when the size is unknown."""
        if self.size is None:
            return None
        return self.current_position / self.size if self.size else 1.0

    def __repr__(self) -> str:
        return (
            f"IterationStatus(current_position={self.current_position}, size={self.size}, "
            f"is_last={self.is_last})"
        )


class EvaluationProgressBar(ProgressBar):
    """The progress line of an evaluation, read from its :class:`IterationStatus`.

    ``validation [######........................]  20.00% 2/10 iterations, 31.4 iters/sec``,
    or ``validation: 5 iterations, 31.4 iters/sec`` when the size is unknown; the speed is
    measured over the last drawings (:meth:`update_speed`). :meth:`update` redraws it in
    place at most every 0.1 s on a terminal, every 5 s on other streams (one line each);
    :meth:`close` draws the final line, which stays.

    Args:
        title: The first word of the line.
        status: The status it shows.
        out: Stream to print to; standard output (looked up at each print) by default.
    """

    def __init__(self, title: str, status: IterationStatus, out: IO[str] | None = None) -> None:
        super().__init__(out)
        self._title = title
        self._status = status
        self._drawn_at = -math.inf
        self.update_speed(status.current_position, status.epoch_detail or 0.0)

    def update(self, manager: Any = None) -> None:
        """Redraw the line, unless it was drawn less than 0.1 s (5 s off a terminal) ago."""
        now = time.perf_counter()
        since = now - self._drawn_at
        if since < _REDRAW_TTY or (since < _REDRAW_FILE and not self._is_terminal()):
            return
        self._drawn_at = now
        super().update(manager)

    def close(self) -> None:
        """Draw the final line, for good."""
        self._draw(final=True)

    def get_lines(self) -> list[str]:
        """Return the progress line (and record the time, for the speed)."""
        status = self._status
        done, size = status.current_position, status.size
        speed, _ = self.update_speed(done, status.epoch_detail or 0.0)
        rate = f"{speed:.4g} iters/sec" if 0 < speed < math.inf else "starting..."
        if size is None:
            return [f"{self._title}: {done} iterations, {rate}"]
        fraction = done / size if size else 1.0
        bar = _bar(fraction, _BAR_LENGTH)
        return [f"{self._title} [{bar}] {fraction:7.2%} {done}/{size} iterations, {rate}"]


class EvaluationRun:
    """One evaluation in progress: its status, its progress line and the sum of its reports.

    Used as a context manager, it draws the final progress line on exit (see :meth:`close`).

    Args:
        size: Number of batches; ``None`` when unknown.
        title: The title of the progress line; ``None`` shows none.

    Attributes:
        status: The :class:`IterationStatus`.
        summary: The reports of every batch, each weighted by the batch size, so that the
            means are over the samples even when the last batch is smaller (a
            ``(value, weight)`` pair reported keeps its weight).
        progress: The progress line, or ``None``.
    """

    def __init__(self, size: int | None, title: str | None) -> None:
        self.status = IterationStatus(size)
        self.summary = reporting.DictSummary()
        self.progress = None if title is None else EvaluationProgressBar(title, self.status)

    def batches(self, iterable: Iterable[_T]) -> Iterator[_T]:
        """Yield the items of ``iterable``, with ``status.is_last`` set for each.

        It looks one item ahead, so that it works without ``len()``.
        """
        iterator = iter(iterable)
        try:
            current = next(iterator)
        except StopIteration:
            return
        for following in iterator:
            yield current
            current = following
        self.status.is_last = True
        yield current

    def add(self, observation: Mapping[str, Any], batch: Any) -> None:
        """Count one more batch done, with what was reported while it was evaluated."""
        if observation:
            self.summary.add(weighted(observation, batch_size_of(batch)))
        self.status.current_position += 1
        if self.progress is not None:
            self.progress.update()

    def close(self) -> None:
        """Draw the final progress line (when shown)."""
        if self.progress is not None:
            self.progress.close()

    def __enter__(self) -> EvaluationRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class OverRanks:
    """What makes each evaluator a DistributedEvaluator (a base placed before the evaluator).

    The means are over the samples of every rank (the weighted sums are added up over the
    default process group, a collective), and rank 0 alone shows the progress (every rank
    evaluates at the same pace).
    """

    _progress_bar: bool

    def _shows_progress(self) -> bool:
        return self._progress_bar and rank() == 0

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        return reduce_summary(summary, "DistributedEvaluator")
