"""Evaluator and IgniteEvaluator: evaluate models on a validation set and report the means."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.runtime import call_with_batch
from pytorch_pfn_extras.training._engine._evaluation import (
    EvaluationRun,
    IterationStatus,
    OverRanks,
    check_metric,
    eval_mode,
    reporter_of,
    run_metrics,
    sized_length,
)
from pytorch_pfn_extras.training._extension import PRIORITY_WRITER, Extension
from pytorch_pfn_extras.training._ignite_manager import import_ignite
from pytorch_pfn_extras.training._trigger_util import TriggerLike

if TYPE_CHECKING:
    from ignite.engine import Engine

    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

MetricFn: TypeAlias = Callable[[Any, Any, bool], "Mapping[str, Any] | None"]
"""``metric_fn(batch, outputs, last_iteration)``; it reports values or returns a dict of them."""
EvalHook: TypeAlias = Callable[["Evaluator"], Any]
"""``eval_hook(evaluator)``, called before each evaluation."""

__all__ = ["DistributedEvaluator", "Evaluator", "IgniteEvaluator", "IterationStatus"]

_T = TypeVar("_T")
_METRIC = "metric_fn(batch, outputs, last_iteration)"


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


def _reject_unknown(owner: str, kwargs: Mapping[str, Any], accepted: str) -> None:
    """PPE takes the options as ``**kwargs``; ours are keyword-only: anything else is a typo."""
    if kwargs:
        message = f"{owner} got unexpected keyword arguments {sorted(kwargs)}; accepted: {accepted}"
        raise TypeError(message)


def _report(outputs: Any, values: Mapping[str, Any], metric_fn: Any) -> Any:
    """What the extension does with a metric's dict: report it (the outputs stay)."""
    reporting.report(values)
    return outputs


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
    the per-batch means; a ``(value, weight)`` pair you report keeps your weight).
    Afterwards each module is back in the mode it had (``module.train(mode)``, as in the
    engine's evaluator), also when the evaluation raises. No reported tensor is converted
    to a Python number before the final mean (one host transfer per device).

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
        self._metrics: list[MetricFn] = []
        for metric_fn in metrics or ():
            self.add_metric(metric_fn)
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
        check_metric(metric_fn, type(self).__name__, _METRIC)
        self._metrics.append(metric_fn)

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
        reporter = reporter_of(self._targets, "" if self.name is None else self.name + "/")
        with reporter, torch.no_grad():
            result = self.evaluate()
        reporting.report(result)
        return result

    def _shows_progress(self) -> bool:
        """Whether an evaluation shows its progress (``progress_bar=True``)."""
        return self._progress_bar

    @contextlib.contextmanager
    def _running(self, iterator: Iterable[Any]) -> Iterator[EvaluationRun]:
        """An evaluation of ``iterator`` under way: the targets in eval mode, the hook called."""
        with eval_mode(self._targets.values()):
            if self.eval_hook is not None:
                self.eval_hook(self)
            title = (self.name or self.default_name) if self._shows_progress() else None
            with EvaluationRun(sized_length(iterator, None, "iterator"), title) as run:
                self._status = run.status
                yield run

    def evaluate(self) -> dict[str, Any]:
        """Evaluate the targets on the ``'main'`` iterator.

        Call it with a reporter current (:meth:`__call__` does).

        Returns:
            The mean of each reported value over the samples (weighted by batch size).
        """
        iterator = self.get_iterator("main")
        with self._running(iterator) as run:
            for batch in run.batches(iterator):
                observation: dict[str, Any] = {}
                with reporting.report_scope(observation):
                    outputs = call_with_batch(self.eval_func, batch)
                    if self._metrics:
                        args = (batch, outputs, run.status.is_last)
                        run_metrics(self._metrics, args, _report, "Evaluator")
                run.add(observation, batch)
        return self._summarize(run.summary).compute_mean()

    def _summarize(self, summary: reporting.DictSummary) -> reporting.DictSummary:
        """The summary whose means :meth:`evaluate` returns: this process's own."""
        return summary


def _engine_evaluates(*args: Any, **kwargs: Any) -> Any:
    message = "IgniteEvaluator evaluates with its ignite engine's process function"
    raise TypeError(message)


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
        self._run: EvaluationRun | None = None  # the evaluation under way
        self._scope = contextlib.ExitStack()  # the report scope of the engine's iteration
        self._observation: dict[str, Any] = {}
        self.set_evaluator_handlers()

    def set_evaluator_handlers(self) -> None:
        """Attach the handlers that collect each iteration's reports (the constructor does).

        They do nothing when the engine runs outside :meth:`evaluate`.
        """
        events, engine = self._events, self.evaluator
        engine.add_event_handler(events.ITERATION_STARTED, self._on_iteration_started)
        engine.add_event_handler(events.ITERATION_COMPLETED, self._on_iteration_completed)

    def _on_iteration_started(self, engine: Engine) -> None:
        if self._run is None:
            return
        self._observation = {}
        self._scope.enter_context(reporting.report_scope(self._observation))

    def _on_iteration_completed(self, engine: Engine) -> None:
        run = self._run
        if run is None:
            return
        state = engine.state
        epoch_length = state.epoch_length
        is_last = epoch_length is not None and state.iteration % epoch_length == 0
        run.status.is_last = is_last
        with self._scope:  # closes the iteration's report scope
            if self._metrics:
                args = (state.batch, state.output, is_last)
                run_metrics(self._metrics, args, _report, "IgniteEvaluator")
        run.add(self._observation, state.batch)

    def evaluate(self) -> dict[str, Any]:
        """Run the engine on the ``'main'`` iterator.

        Returns:
            The means of the values reported during the run, and ``val/<name>`` for each of
            the engine's metrics.
        """
        iterator = self.get_iterator("main")
        with self._running(iterator) as run:
            self._run = run
            try:
                with self._scope:  # also when the engine raises within an iteration
                    self.evaluator.run(iterator)
            finally:
                self._run = None
        result: dict[str, Any] = run.summary.compute_mean()
        for name, value in self.evaluator.state.metrics.items():
            result[f"val/{name}"] = value
        return result


class DistributedEvaluator(OverRanks, Evaluator):
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
