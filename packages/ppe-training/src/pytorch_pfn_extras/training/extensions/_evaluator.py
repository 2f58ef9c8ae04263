"""Evaluator and IgniteEvaluator: evaluate models on a validation set and report the means."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.distributed._collective import rank, reduce_summary
from pytorch_pfn_extras.runtime import call_with_batch
from pytorch_pfn_extras.training._batch import batch_size_of, weighted
from pytorch_pfn_extras.training._extension import PRIORITY_WRITER, Extension
from pytorch_pfn_extras.training._ignite_manager import import_ignite
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.training.extensions._progress_bar import _bar

if TYPE_CHECKING:
    from ignite.engine import Engine

    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

MetricFn: TypeAlias = Callable[[Any, Any, bool], "Mapping[str, Any] | None"]
"""``metric_fn(batch, outputs, last_iteration)``; it reports values or returns a dict of them."""
EvalHook: TypeAlias = Callable[["Evaluator"], Any]
"""``eval_hook(evaluator)``, called before each evaluation."""

_T = TypeVar("_T")

# Seconds between two redraws of the progress line (always drawn at the end).
_REDRAW_TTY = 0.1
_REDRAW_FILE = 5.0
_BAR_LENGTH = 30


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


class _EvaluationProgress:
    """One progress line on standard output, redrawn in place on a terminal."""

    def __init__(self, name: str, status: IterationStatus) -> None:
        self._name = name
        self._status = status
        self._start = time.perf_counter()
        self._drawn_at = -math.inf

    def update(self, final: bool = False) -> None:
        out = sys.stdout
        isatty = getattr(out, "isatty", None)
        tty = callable(isatty) and bool(isatty())
        now = time.perf_counter()
        if not final and now - self._drawn_at < (_REDRAW_TTY if tty else _REDRAW_FILE):
            return
        self._drawn_at = now
        line = self._line(now - self._start)
        if tty:
            out.write("\r\x1b[K" + line + ("\n" if final else ""))
        else:
            out.write(line + "\n")
        out.flush()

    def _line(self, elapsed: float) -> str:
        done, size = self._status.current_position, self._status.size
        speed = f"{done / elapsed:.4g} iters/sec" if done and elapsed > 0 else "starting..."
        if size is None:
            return f"{self._name}: {done} iterations, {speed}"
        fraction = done / size if size else 1.0
        bar = _bar(fraction, _BAR_LENGTH)
        return f"{self._name} [{bar}] {fraction:7.2%} {done}/{size} iterations, {speed}"


def _named(
    value: Any,
    what: str,
    is_item: Callable[[Any], bool],
    expected: str,
    *,
    may_be_empty: bool = False,
) -> dict[str, Any]:
    """``{'main': value}``, or a copy of a mapping of names to items, checked."""
    if not isinstance(value, Mapping):
        if not is_item(value):
            message = f"Evaluator: {what} must be {expected} or a dict of them, got {type(value).__name__}"
            raise TypeError(message)
        return {"main": value}
    if not value and not may_be_empty:
        message = f"Evaluator: {what} is an empty dict; give at least one {expected}"
        raise ValueError(message)
    for name, item in value.items():
        if not isinstance(name, str):
            message = f"Evaluator: the names of {what} must be strings, got {name!r}"
            raise TypeError(message)
        if not is_item(item):
            message = f"Evaluator: {what}[{name!r}] must be {expected}, got {type(item).__name__}"
            raise TypeError(message)
    return dict(value)


def _is_iterable(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes))


def _is_module(value: Any) -> bool:
    return isinstance(value, torch.nn.Module)


def _lookup(mapping: Mapping[str, _T], name: str, what: str) -> _T:
    try:
        return mapping[name]
    except KeyError:
        message = f"Evaluator has no {what} named {name!r}; it has {sorted(mapping)}"
        raise KeyError(message) from None


def _length_of(iterator: Iterable[Any]) -> int | None:
    try:
        return len(iterator)  # type: ignore[arg-type]
    except TypeError:  # no __len__ (a generator, an IterableDataset's loader)
        return None


def _with_last(iterable: Iterable[_T]) -> Iterator[tuple[_T, bool]]:
    """Yield ``(item, is_last)``, looking one item ahead (works without ``len()``)."""
    iterator = iter(iterable)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


@contextlib.contextmanager
def _eval_mode(targets: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Put ``targets`` in eval mode; restore every submodule's own mode on exit."""
    saved = [(target, [(m, m.training) for m in target.modules()]) for target in targets]
    for target, _ in saved:
        target.eval()
    try:
        yield
    finally:
        for target, modes in saved:
            if len({mode for _, mode in modes}) == 1:
                target.train(modes[0][1])
            else:  # mixed modes (e.g. a frozen BatchNorm): parents first, then children
                for module, mode in modes:
                    module.train(mode)


def _check_metric(metric_fn: Any) -> MetricFn:
    if not callable(metric_fn):
        message = (
            "Evaluator: a metric must be a callable metric_fn(batch, outputs, last_iteration), "
            f"got {type(metric_fn).__name__}"
        )
        raise TypeError(message)
    return metric_fn  # type: ignore[no-any-return]


def _reject_unknown(owner: str, kwargs: Mapping[str, Any], accepted: str) -> None:
    """PPE takes the options as ``**kwargs``; ours are keyword-only: anything else is a typo."""
    if kwargs:
        message = f"{owner} got unexpected keyword arguments {sorted(kwargs)}; accepted: {accepted}"
        raise TypeError(message)


def _run_metric(metric_fn: MetricFn, batch: Any, outputs: Any, is_last: bool) -> None:
    values = metric_fn(batch, outputs, is_last)
    if values is None:
        return
    if not isinstance(values, Mapping):
        message = (
            f"Evaluator: the metric {metric_fn!r} returned a {type(values).__name__}; a metric "
            "returns None (after reporting its values) or a dict of values to report"
        )
        raise TypeError(message)
    reporting.report(values)


class Evaluator(Extension):
    """An extension to evaluate models on a validation set.

    Each call builds a fresh :class:`~pytorch_pfn_extras.reporting.Reporter` on which every
    target is an observer named ``"<extension name>/<target name>"`` (its submodules
    ``"<extension name>/<target name>/<submodule>"``), runs :meth:`evaluate` under it and
    :func:`torch.no_grad`, and reports the means to the caller's reporter (the manager's),
    so that ``LogReport`` and ``PrintReport`` see them. A model that reports
    ``{"val/loss": loss}`` without an observer gives ``val/loss``; one that reports with
    ``self`` as observer gives ``validation/main/loss``.

    :meth:`evaluate` puts the targets in eval mode, calls ``eval_hook(self)``, then calls
    :meth:`eval_func` on each batch of the ``'main'`` iterator (a dict batch as keyword
    arguments, a tuple or list as positional arguments, anything else as one argument) and
    each metric with ``(batch, outputs, last_iteration)``. The values reported for a batch
    are weighted by its size (the first dimension of the first tensor in the batch), so the
    result is the mean over all samples even when the last batch is smaller (PPE averages
    the per-batch means; a ``(value, weight)`` pair you report keeps your weight). Afterwards every target is back in the mode it had,
    also when the evaluation raises. No reported tensor is converted to a Python number
    before the final mean (one host transfer per device).

    Override :meth:`evaluate` to change the loop (it runs with the evaluation reporter
    current), or :meth:`eval_func` to change what is done with each batch.

    Args:
        iterator: The validation data (a ``DataLoader`` or any iterable of batches), or a
            dict of them; a single one is named ``'main'``.
        target: The module to evaluate, or a dict of modules; a single one is named
            ``'main'``. With ``eval_func`` (or an overridden :meth:`eval_func`), an empty
            dict is accepted: the function evaluates on its own.
        eval_hook: Called with the evaluator before each evaluation (e.g. to reset the state
            of a recurrent network).
        eval_func: Called on each batch; the ``'main'`` target by default.
        progress_bar: Print a progress line to standard output while evaluating (a count
            only for an iterator without ``len()``).
        metrics: Callables ``metric_fn(batch, outputs, last_iteration)`` called after
            ``eval_func`` on each batch; ``last_iteration`` is true for the last batch. A
            metric reports its values with :func:`~pytorch_pfn_extras.reporting.report`, or
            returns a dict of values to report.
        **kwargs: PPE's signature takes ``progress_bar`` and ``metrics`` from ``**kwargs``;
            any other keyword raises a TypeError.

    Raises:
        TypeError: An iterator that is not iterable, a target that is not a module, a hook,
            function or metric that is not callable, or an unknown keyword argument.
        ValueError: An empty dict of iterators, or no ``eval_func`` and no target named
            ``'main'`` (an empty dict of targets included).

    Example:
        >>> manager.extend(extensions.Evaluator(val_loader, model, progress_bar=True))
        >>> manager.extend(extensions.LogReport())
        >>> manager.extend(extensions.PrintReport(["epoch", "main/loss", "val/loss"]))
    """

    trigger: TriggerLike = (1, "epoch")
    priority = PRIORITY_WRITER

    def __init__(
        self,
        iterator: Iterable[Any] | Mapping[str, Iterable[Any]],
        target: torch.nn.Module | Mapping[str, torch.nn.Module],
        eval_hook: EvalHook | None = None,
        eval_func: Callable[..., Any] | None = None,
        *,
        progress_bar: bool = False,
        metrics: Iterable[MetricFn] | None = None,
        **kwargs: Any,
    ) -> None:
        _reject_unknown(type(self).__name__, kwargs, "progress_bar, metrics")
        self._iterators: dict[str, Iterable[Any]] = _named(
            iterator, "iterator", _is_iterable, "an iterable of batches"
        )
        for what, fn in (("eval_hook", eval_hook), ("eval_func", eval_func)):
            if fn is not None and not callable(fn):
                message = f"Evaluator: {what} must be callable or None, got {type(fn).__name__}"
                raise TypeError(message)
        # With an eval_func (given or overridden) no target is called: PPE accepts target={}.
        calls_a_target = eval_func is None and type(self).eval_func is Evaluator.eval_func
        self._targets: dict[str, torch.nn.Module] = _named(
            target, "target", _is_module, "a torch.nn.Module", may_be_empty=not calls_a_target
        )
        if calls_a_target and "main" not in self._targets:
            message = (
                "Evaluator: without eval_func, the 'main' target is called on each batch, "
                f"but the targets are {sorted(self._targets)}; pass eval_func="
            )
            raise ValueError(message)
        self.eval_hook: EvalHook | None = eval_hook
        """Function to prepare for each evaluation, called with the evaluator."""
        self._eval_func = eval_func
        self._progress_bar = bool(progress_bar)
        self._metrics: list[MetricFn] = [_check_metric(m) for m in metrics or ()]
        self._status: IterationStatus | None = None

    @property
    def default_name(self) -> str:
        """Default name of the extension: ``'validation'``."""
        return "validation"

    @property
    def status(self) -> IterationStatus | None:
        """Progress of the running (or last) evaluation; ``None`` before the first."""
        return self._status

    def eval_func(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one batch: call the constructor's ``eval_func``, else the ``'main'`` target.

        :meth:`evaluate` calls it with the batch unpacked (a dict as keyword arguments, a
        tuple or list as positional arguments, anything else as one argument); override it
        in a subclass to change what is done with each batch.

        Returns:
            What the function or the target returns (passed to the metrics).
        """
        fn = self._eval_func if self._eval_func is not None else self._targets["main"]
        return fn(*args, **kwargs)

    def add_metric(self, metric_fn: MetricFn) -> None:
        """Add a metric ``metric_fn(batch, outputs, last_iteration)`` called on each batch.

        Raises:
            TypeError: ``metric_fn`` is not callable.
        """
        self._metrics.append(_check_metric(metric_fn))

    def get_iterator(self, name: str) -> Iterable[Any]:
        """Return the iterator named ``name``.

        Raises:
            KeyError: No iterator has that name (the message lists the names).
        """
        return _lookup(self._iterators, name, "iterator")

    def get_all_iterators(self) -> dict[str, Iterable[Any]]:
        """Return a dict of all iterators by name."""
        return dict(self._iterators)

    def get_target(self, name: str) -> torch.nn.Module:
        """Return the target named ``name``.

        Raises:
            KeyError: No target has that name (the message lists the names).
        """
        return _lookup(self._targets, name, "target")

    def get_all_targets(self) -> dict[str, torch.nn.Module]:
        """Return a dict of all targets by name."""
        return dict(self._targets)

    def __call__(self, manager: ExtensionsManagerProtocol | None = None) -> dict[str, Any]:
        """Evaluate the targets and report the means to the current reporter.

        Args:
            manager: The calling manager (unused; the evaluator may be called alone).

        Returns:
            The means of the values reported during the evaluation.
        """
        reporter = reporting.Reporter()
        prefix = "" if self.name is None else self.name + "/"
        for name, target in self._targets.items():
            reporter.add_observer(prefix + name, target)
            reporter.add_observers(
                prefix + name + "/", [(sub, m) for sub, m in target.named_modules() if sub]
            )
        with reporter, torch.no_grad():
            result = self.evaluate()
        reporting.report(result)
        return result

    def _progress(self, status: IterationStatus) -> _EvaluationProgress | None:
        if not self._progress_bar:
            return None
        return _EvaluationProgress(self.name or self.default_name, status)

    def evaluate(self) -> dict[str, Any]:
        """Evaluate the targets on the ``'main'`` iterator.

        Call it with a reporter current (:meth:`__call__` does).

        Returns:
            The mean of each reported value over the samples (weighted by batch size).
        """
        iterator = self.get_iterator("main")
        summary = reporting.DictSummary()
        with _eval_mode(self._targets.values()):
            if self.eval_hook is not None:
                self.eval_hook(self)
            status = self._status = IterationStatus(_length_of(iterator))
            progress = self._progress(status)
            try:
                for batch, is_last in _with_last(iterator):
                    status.is_last = is_last
                    observation: dict[str, Any] = {}
                    with reporting.report_scope(observation):
                        outputs = call_with_batch(self.eval_func, batch)
                        for metric_fn in self._metrics:
                            _run_metric(metric_fn, batch, outputs, is_last)
                    summary.add(weighted(observation, batch_size_of(batch)))
                    status.current_position += 1
                    if progress is not None:
                        progress.update()
            finally:
                if progress is not None:
                    progress.update(final=True)
        return self._summarize(summary).compute_mean()

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary whose means :meth:`evaluate` returns: this process's own."""
        return summary


def _engine_evaluates(*args: Any, **kwargs: Any) -> Any:
    message = "IgniteEvaluator evaluates with its ignite engine's process function"
    raise TypeError(message)


class _IgniteRun:
    """What the engine's handlers need during one :meth:`IgniteEvaluator.evaluate`."""

    def __init__(
        self,
        summary: reporting.DictSummary,
        status: IterationStatus,
        progress: _EvaluationProgress | None,
    ) -> None:
        self.summary = summary
        self.status = status
        self.progress = progress
        self.scope = contextlib.ExitStack()  # the observation scope of the current iteration
        self.observation: dict[str, Any] = {}


class IgniteEvaluator(Evaluator):
    """An :class:`Evaluator` that runs an Ignite evaluator engine.

    Each evaluation runs ``evaluator.run(iterator)`` and reports the engine's metrics (those
    given to ``ignite.engine.create_supervised_evaluator``) as ``val/<metric>``, together
    with the means of the values reported during the run (by the model, by your handlers,
    by ``metrics``), each batch weighted by its size.

    Args:
        evaluator: The Ignite evaluator engine (``ignite.engine.Engine``).
        iterator: The validation data, or a dict of them (the ``'main'`` one is run).
        target: The evaluated module, or a dict of modules (put in eval mode, and back).
        eval_hook: Called with the extension before each evaluation.
        progress_bar: Print a progress line to standard output while evaluating.
        metrics: Callables ``metric_fn(batch, outputs, last_iteration)`` called after each
            iteration with the engine's ``state.batch`` and ``state.output``;
            ``last_iteration`` is true on the last one when the epoch length is known.
        **kwargs: As in PPE's signature; any other keyword raises a TypeError.

    Raises:
        ImportError: pytorch-ignite is not installed.
        TypeError: ``evaluator`` is not an Ignite engine, or another argument has the
            wrong type (as in :class:`Evaluator`).

    Example:
        >>> evaluator = create_supervised_evaluator(
        ...     model, metrics={"acc": Accuracy(), "loss": Loss(F.nll_loss)})
        >>> manager.extend(extensions.IgniteEvaluator(evaluator, val_loader, model))
        >>> manager.extend(extensions.PrintReport(["epoch", "val/loss", "val/acc"]))
    """

    def __init__(
        self,
        evaluator: Engine,
        iterator: Iterable[Any] | Mapping[str, Iterable[Any]],
        target: torch.nn.Module | Mapping[str, torch.nn.Module],
        *,
        eval_hook: EvalHook | None = None,
        progress_bar: bool = False,
        metrics: Iterable[MetricFn] | None = None,
        **kwargs: Any,
    ) -> None:
        _reject_unknown(type(self).__name__, kwargs, "eval_hook, progress_bar, metrics")
        engine_module = import_ignite("IgniteEvaluator")
        if not isinstance(evaluator, engine_module.Engine):
            message = (
                "IgniteEvaluator needs an ignite.engine.Engine as evaluator, "
                f"got {type(evaluator).__name__}"
            )
            raise TypeError(message)
        super().__init__(
            iterator,
            target,
            eval_hook,
            _engine_evaluates,
            progress_bar=progress_bar,
            metrics=metrics,
        )
        self.evaluator = evaluator
        """The Ignite evaluator engine."""
        self._events = engine_module.Events
        self._run: _IgniteRun | None = None
        self.set_evaluator_handlers()

    def set_evaluator_handlers(self) -> None:
        """Attach the handlers that collect each iteration's reports (the constructor does).

        They do nothing when the engine runs outside :meth:`evaluate`.
        """
        events, engine = self._events, self.evaluator
        engine.add_event_handler(events.ITERATION_STARTED, self._on_iteration_started)
        engine.add_event_handler(events.ITERATION_COMPLETED, self._on_iteration_completed)

    def _on_iteration_started(self, engine: Engine) -> None:
        run = self._run
        if run is None:
            return
        run.observation = {}
        run.scope.enter_context(reporting.report_scope(run.observation))

    def _on_iteration_completed(self, engine: Engine) -> None:
        run = self._run
        if run is None:
            return
        state = engine.state
        epoch_length = state.epoch_length
        is_last = epoch_length is not None and state.iteration % epoch_length == 0
        run.status.is_last = is_last
        with run.scope:  # closes the iteration's observation scope
            for metric_fn in self._metrics:
                _run_metric(metric_fn, state.batch, state.output, is_last)
        run.summary.add(weighted(run.observation, batch_size_of(state.batch)))
        run.status.current_position += 1
        if run.progress is not None:
            run.progress.update()

    def evaluate(self) -> dict[str, Any]:
        """Run the engine on the ``'main'`` iterator.

        Returns:
            The means of the values reported during the run, and ``val/<name>`` for each of
            the engine's metrics.
        """
        iterator = self.get_iterator("main")
        summary = reporting.DictSummary()
        with _eval_mode(self._targets.values()):
            if self.eval_hook is not None:
                self.eval_hook(self)
            status = self._status = IterationStatus(_length_of(iterator))
            run = self._run = _IgniteRun(summary, status, self._progress(status))
            try:
                with run.scope:
                    self.evaluator.run(iterator)
            finally:
                self._run = None
                if run.progress is not None:
                    run.progress.update(final=True)
        result: dict[str, Any] = summary.compute_mean()
        for name, value in self.evaluator.state.metrics.items():
            result[f"val/{name}"] = value
        return result


class DistributedEvaluator(Evaluator):
    """An :class:`Evaluator` whose means are over the samples of every process.

    Each process evaluates its own share of the validation data: give each rank an
    iterator over a :class:`~pytorch_pfn_extras.distributed.DistributedValidationSampler`,
    so that each sample is evaluated exactly once. After the loop, the sums of every
    reported value (weighted by batch size) are added up over the ranks of the default
    process group, so every rank reports the same means, those of one process evaluating
    the whole data set. The reduction is a collective: every rank must run the evaluator
    at the same iterations (give it the same trigger everywhere). Without a process group it
    is a plain :class:`Evaluator`. The means are Python floats.

    The arguments are those of :class:`Evaluator`; ``progress_bar=True`` draws the progress
    line on rank 0 only (the other ranks print nothing), as PPE does.

    Raises:
        RuntimeError: (when called) the job was started as several processes but
            torch.distributed is not initialized.

    Example:
        >>> sampler = ppe.distributed.DistributedValidationSampler(val_set)
        >>> loader = DataLoader(val_set, batch_size=64, sampler=sampler)
        >>> manager.extend(extensions.DistributedEvaluator(loader, model))
    """

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary of every rank's values (a collective)."""
        return reduce_summary(summary, "DistributedEvaluator")

    def _progress(self, status: IterationStatus) -> _EvaluationProgress | None:
        if rank() != 0:
            return None
        return super()._progress(status)
