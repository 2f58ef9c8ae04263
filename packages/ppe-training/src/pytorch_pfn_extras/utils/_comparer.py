"""Run several trainers or evaluators in lock-step and check that they compute the same values.

A :class:`Comparer` hooks the handler of every engine it runs (instance attributes that
wrap ``train_step``/``train_post_step`` or ``eval_step``/``eval_post_step``; removed when
the run ends). After each step that its trigger selects, an engine records its values
(the step's outputs, its parameters and the :func:`intermediate_value` calls of the step)
as detached CPU copies named ``"outputs/<key>"``, ``"params/<model>/<parameter>"`` and
``"intermediates/<name>"``, and hands them on: engines that run at the same time wait for
each other at every recorded step (:class:`_LockStep`) and the last to arrive compares
every engine's values with the baseline's; engines that run later, and dumps, are
compared with the baseline's values kept from its run (:class:`_Recording`).
"""

from __future__ import annotations

import contextlib
import copy
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeAlias, cast

import numpy as np
import torch

from pytorch_pfn_extras.training import Evaluator, Trainer, get_trigger

if TYPE_CHECKING:
    from os import PathLike

    from pytorch_pfn_extras.training import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike

__all__ = [
    "Comparer",
    "ModelComparer",
    "OutputsComparer",
    "get_default_comparer",
    "intermediate_value",
]

CompareFn: TypeAlias = Callable[[str, str, str, Any, Any], None]
Engine: TypeAlias = Trainer | Evaluator
# What one engine recorded at one step, by name ("outputs/loss", "params/main/w.weight"...).
Values: TypeAlias = dict[str, Any]
# Engine name -> values it recorded at a step (in the order the engines are compared).
Arrivals: TypeAlias = dict[str, tuple[int, Values]]

_INDEX = "comparer_index.pt"


def get_default_comparer(rtol: float = 1e-4, atol: float = 0, equal_nan: bool = True) -> CompareFn:
    """Return a ``compare_fn`` that asserts that two values are close.

    The values are compared as by ``torch.testing.assert_close(val2, val1, rtol=rtol,
    atol=atol, equal_nan=equal_nan)`` (``val1``, the baseline's, is the expected one), except
    that tensors on different devices or of different dtypes are compared by value: engines
    on different backends are what comparers are for.

    Args:
        rtol: Relative tolerance.
        atol: Absolute tolerance.
        equal_nan: Whether NaNs at the same positions count as equal.

    Returns:
        ``compare_fn(backend1, backend2, name, val1, val2)``, which raises an
        :class:`AssertionError` naming both engines and the value when they differ.

    Example:
        >>> comparer = Comparer(compare_fn=get_default_comparer(rtol=1e-3, atol=1e-6))
    """

    def compare_fn(backend1: str, backend2: str, name: str, val1: Any, val2: Any) -> None:
        try:
            torch.testing.assert_close(
                val2,
                val1,
                rtol=rtol,
                atol=atol,
                equal_nan=equal_nan,
                check_device=False,
                check_dtype=False,
            )
        except AssertionError as error:
            message = f"{name!r} of {backend2!r} is not close to that of {backend1!r}: {error}"
            raise AssertionError(message) from None

    return compare_fn


_DEFAULT_COMPARE_FN = get_default_comparer()


# ---------------------------------------------------------------------- recording


class _Capture(threading.local):
    # The intermediate values of the step running on this thread; None outside a
    # recorded step, which makes intermediate_value() a no-op.
    values: Values | None = None


_capture = _Capture()


def _snapshot(value: Any) -> Any:
    """A detached CPU copy of the tensors in ``value``; containers are copied, other values kept."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, Mapping):
        return {key: _snapshot(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_snapshot(item) for item in value]
    if isinstance(value, tuple):  # named tuples too: a dump stores only plain containers
        return tuple(_snapshot(item) for item in value)
    return value


def intermediate_value(name: str, value: Any) -> None:
    """Record a value computed inside a model's forward, for the comparer running it.

    While a :class:`Comparer` runs the engine that calls the model (and its trigger selects
    the current step), ``value`` is copied and compared across engines as
    ``"intermediates/<name>"``, before the outputs: the first intermediate value that
    diverges shows where two models start to differ. A name recorded several times in one
    step is compared occurrence by occurrence (``name``, ``name[1]``, ``name[2]``...).
    Anywhere else (no comparer, another thread, an evaluation run by a compared trainer)
    it does nothing.

    Args:
        name: Name of the value.
        value: A tensor, a number, or a list/tuple/dict of them.

    Example:
        >>> def forward(self, x):
        ...     h = self.encoder(x)
        ...     ppe.utils.comparer.intermediate_value("hidden", h)
        ...     return {"loss": self.head(h).sum()}
    """
    values = _capture.values
    if values is None:
        return
    if not isinstance(name, str):
        message = f"intermediate_value() needs a str name, got {name!r}"
        raise TypeError(message)
    key = base = f"intermediates/{name}"
    occurrence = 0
    while key in values:
        occurrence += 1
        key = f"{base}[{occurrence}]"
    values[key] = _snapshot(value)


def _names(value: Any, argument: str) -> bool | tuple[str, ...]:
    """``True``/``False``, or the names of a ``str``/list-of-``str`` selection."""
    if isinstance(value, bool):
        return value
    names = (
        (value,)
        if isinstance(value, str)
        else tuple(value)
        if isinstance(value, Sequence)
        else None
    )
    if names is None or not all(isinstance(name, str) for name in names):
        message = f"{argument} must be True, False or a list of names, got {value!r}"
        raise TypeError(message)
    return names


def _named_outputs(outputs: Any) -> dict[str, Any]:
    if outputs is None:
        return {}
    if isinstance(outputs, Mapping):
        return {str(key): value for key, value in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return {str(index): value for index, value in enumerate(outputs)}
    return {"output": outputs}


def _selected(
    available: dict[str, Any], names: bool | tuple[str, ...], what: str
) -> dict[str, Any]:
    if names is True:
        return available
    if names is False:
        return {}
    missing = [name for name in names if name not in available]
    if missing:
        message = f"no {what} named {missing}; the {what}s are {sorted(available)}"
        raise ValueError(message)
    return {name: available[name] for name in names}


@dataclass(frozen=True)
class _Selection:
    """Which outputs and parameters an engine records (``True``: all of them)."""

    outputs: bool | tuple[str, ...]
    params: bool | tuple[str, ...]

    def collect(self, engine: Engine, outputs: Any, intermediates: Values) -> Values:
        values = dict(intermediates)
        for key, value in _selected(_named_outputs(outputs), self.outputs, "output").items():
            values[f"outputs/{key}"] = _snapshot(value)
        if self.params is not False:
            parameters = {
                f"{model_name}/{name}": parameter
                for model_name, model in engine.models.items()
                for name, parameter in model.named_parameters()
            }
            for key, value in _selected(parameters, self.params, "parameter").items():
                values[f"params/{key}"] = _snapshot(value)
        return values


class _Position:
    """What a trigger reads of a manager, for the step count of an engine under a comparer."""

    is_before_training = False

    def __init__(self, iteration: int, epoch_length: int | None) -> None:
        self.iteration = iteration
        self._epoch_length = epoch_length

    @property
    def iters_per_epoch(self) -> int:
        if self._epoch_length is None:
            message = (
                "the comparer's trigger counts epochs, but an evaluator has none; use an "
                "iteration trigger such as (1, 'iteration')"
            )
            raise ValueError(message)
        return self._epoch_length

    @property
    def epoch(self) -> int:
        return self.iteration // self.iters_per_epoch

    @property
    def epoch_detail(self) -> float:
        return self.iteration / self.iters_per_epoch


Sink: TypeAlias = Callable[[str, int, Values], None]


class _Recorder:
    """Hooks one engine's handler and hands the values of every triggered step to a sink."""

    def __init__(
        self, name: str, engine: Engine, selection: _Selection, trigger: Trigger, sink: Sink
    ) -> None:
        self.name = name
        self.steps = 0
        self._engine = engine
        self._selection = selection
        self._trigger = trigger
        self._sink = sink

    def _fires(self, step: int) -> bool:
        engine = self._engine
        epoch_length = engine.train_len if isinstance(engine, Trainer) else None
        position = cast("ExtensionsManagerProtocol", _Position(step, epoch_length))
        return bool(self._trigger(position))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the handler's step callbacks on the instance while the context is open."""
        handler = self._engine.handler
        kind = "train" if isinstance(self._engine, Trainer) else "eval"
        step_name, post_name = f"{kind}_step", f"{kind}_post_step"
        step_fn = getattr(handler, step_name)
        post_fn = getattr(handler, post_name)

        def step(engine: Any, batch_idx: int, batch: Any, complete_fn: Any) -> None:
            self.steps += 1
            previous = _capture.values
            _capture.values = {} if self._fires(self.steps) else None
            try:
                step_fn(engine, batch_idx, batch, complete_fn)
            finally:
                _capture.values = previous

        def post_step(engine: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
            post_fn(engine, batch_idx, batch, outputs)  # the optimizer steps first
            intermediates = _capture.values
            if intermediates is None:
                return
            _capture.values = None
            try:
                values = self._selection.collect(self._engine, outputs, intermediates)
            except ValueError as error:
                message = f"engine {self.name!r} at iteration {self.steps}: {error}"
                raise ValueError(message) from None
            self._sink(self.name, self.steps, values)

        own = vars(handler)
        saved = {name: own.get(name, _MISSING) for name in (step_name, post_name)}
        setattr(handler, step_name, step)
        setattr(handler, post_name, post_step)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is _MISSING:
                    delattr(handler, name)
                else:
                    setattr(handler, name, value)


_MISSING = object()


# ---------------------------------------------------------------------- recordings


def _step_file(directory: Path, step: int) -> Path:
    return directory / f"iteration_{step:08d}.pt"


class _Recording:
    """The values the baseline (or a dump) recorded, by step: in memory or in a directory."""

    def __init__(self, name: str, directory: Path | None = None) -> None:
        self.name = name
        self.steps: list[int] = []
        self.total = 0
        self._directory = directory
        self._memory: dict[int, Values] = {}
        if directory is not None:
            index_path = directory / _INDEX
            if not index_path.is_file():
                message = (
                    f"{str(directory)!r} is not a complete comparer dump (no {_INDEX}); "
                    "create it with Comparer.dump(engine, dir, *loaders)"
                )
                raise ValueError(message)
            index = torch.load(index_path, weights_only=True)
            self.steps = list(index["steps"])
            self.total = int(index["total"])

    def add(self, step: int, values: Values) -> None:
        self.steps.append(step)
        self._memory[step] = values

    def get(self, step: int) -> Values | None:
        if self._directory is None:
            return self._memory.get(step)
        if step not in self.steps:
            return None
        values: Values = torch.load(
            _step_file(self._directory, step), weights_only=True, map_location="cpu"
        )
        return values


class _RandomState(NamedTuple):
    """The global random states, reset before each group of engines starts."""

    python: Any
    numpy: Any
    torch: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def capture(cls) -> _RandomState:
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda = torch.cuda.get_rng_state_all()
        return cls(random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


# ---------------------------------------------------------------------- lock-step


class _Aborted(BaseException):
    """Stops an engine because another one failed (a BaseException: ``except Exception``
    in user code does not swallow it)."""


class _LockStep:
    """Engines running at once: each recorded step waits until all of them recorded it.

    The last engine to arrive calls ``settle(arrivals)`` (which compares them) while the
    others wait. The first error (an engine's own, or a divergence) is kept in
    :attr:`failure`; every engine still running is then stopped with :class:`_Aborted` at
    its next recorded step, or at once if it is waiting.
    """

    def __init__(self, names: Sequence[str], settle: Callable[[Arrivals], None]) -> None:
        self._cond = threading.Condition()
        self._settle = settle
        self._order = list(names)
        self._running = set(names)
        self._arrived: Arrivals = {}
        self._round = 0
        self.totals: dict[str, int] = {}
        self.failure: BaseException | None = None

    def arrive(self, name: str, step: int, values: Values) -> None:
        with self._cond:
            if self.failure is not None:
                raise _Aborted
            self._arrived[name] = (step, values)
            if self.totals:  # an engine has finished: this step has nothing to compare with
                self._fail(self._unmatched())
            if self._arrived.keys() == self._running:
                arrived = {n: self._arrived[n] for n in self._order if n in self._arrived}
                self._arrived = {}
                try:
                    self._settle(arrived)
                except BaseException as error:
                    self._fail(error)
                finally:
                    self._round += 1
                    self._cond.notify_all()
                return
            current = self._round
            self._cond.wait_for(lambda: self._round != current or self.failure is not None)
            if self.failure is not None:
                raise _Aborted

    def leave(self, name: str, total: int, error: BaseException | None) -> None:
        """Called when an engine's run ends, with its number of steps and its error."""
        with self._cond:
            self._running.discard(name)
            self.totals[name] = total
            if self.failure is None:
                if error is not None and not isinstance(error, _Aborted):
                    self.failure = error
                elif self._arrived:
                    self.failure = self._unmatched()
            self._cond.notify_all()

    def abort(self, error: BaseException) -> None:
        with self._cond:
            if self.failure is None:
                self.failure = error
            self._cond.notify_all()

    def _fail(self, error: BaseException) -> NoReturn:
        if self.failure is None:
            self.failure = error
        self._cond.notify_all()
        raise error

    def _unmatched(self) -> AssertionError:
        finished = ", ".join(f"{n!r} after {total}" for n, total in self.totals.items())
        going = ", ".join(f"{n!r} to iteration {step}" for n, (step, _) in self._arrived.items())
        message = (
            f"the engines ran different numbers of iterations: {finished} finished, {going} went on"
        )
        return AssertionError(message)


# ---------------------------------------------------------------------- comparers


class _Member(NamedTuple):
    """An engine added to a comparer, with the arguments of its ``run``."""

    engine: Engine
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _check_engine(engine: Any) -> Engine:
    if not isinstance(engine, (Trainer, Evaluator)):
        message = (
            "a comparer runs engines made by ppe.engine.create_trainer or create_evaluator, "
            f"got {type(engine).__name__}"
        )
        raise TypeError(message)
    return engine


class Comparer:
    """Run trainers or evaluators side by side and check that they compute the same values.

    Add the engines (:meth:`add_engine`, with the arguments of their ``run``) or dumps of
    earlier runs (:meth:`add_dump`), then call :meth:`compare`. Every engine runs with the
    handler of its own; after each step selected by ``trigger`` it records, as detached
    CPU copies, the :func:`intermediate_value` calls of the step, the step's outputs
    (``"outputs/<key>"``; the keys of a dict, the indices of a list or tuple, ``"output"``
    for anything else) and the parameters after the optimizer step
    (``"params/<model>/<parameter>"``). These are compared, in that order, with the
    baseline's by ``compare_fn(baseline_name, name, value_name, baseline_value, value)``.
    The first difference raises an :class:`AssertionError` that names both engines, the
    value and the iteration (the number of steps the engine ran under the comparer,
    counting from 1: a fresh trainer's ``iteration``, an evaluator's batch number).
    Engines that run a different number of steps, or record different values, diverge too.

    Up to ``concurrency`` engines run at once, each in a thread, in lock-step: at every
    recorded step they wait for each other and are compared before any goes on. An engine
    that raises stops the others at their next recorded step, and :meth:`compare` re-raises
    its error. Engines that do not fit in the first group run afterwards, group by group,
    and are compared with the values the baseline recorded (which are then kept in memory).
    Before each group starts, the global random states (Python, NumPy, torch CPU and CUDA)
    are reset to those of the call to :meth:`compare`: engines run one after another draw
    the same random numbers (dropout, a shuffling loader). Engines running at once share
    these generators, so compare models that draw random numbers with ``concurrency=1``,
    or give their loaders generators of their own.

    Args:
        trigger: When to record and compare: a trigger (or ``(period, unit)``), asked at
            each step with the engine's step count in place of a manager (it may read
            ``iteration``, ``epoch``, ``epoch_detail`` and ``iters_per_epoch``); every
            iteration by default. Epochs are a trainer's (evaluators have none).
        compare_fn: ``compare_fn(backend1, backend2, name, val1, val2)``, raising
            :class:`AssertionError` when the values differ; see
            :func:`get_default_comparer`.
        concurrency: How many engines run at once; all of them by default.
        outputs: Compare the step outputs: ``True`` (all), ``False``, or a list of keys.
        params: Compare the parameters: ``True`` (all), ``False``, or a list of
            ``"<model>/<parameter>"`` names (``"main/linear.weight"``).
        baseline: Name of the engine or dump the others are compared with; the first one
            added by default.

    Example:
        >>> comparer = ppe.utils.comparer.Comparer(params=True)
        >>> comparer.add_engine("cpu", cpu_trainer, train_loader)
        >>> comparer.add_engine("cuda", cuda_trainer, train_loader)
        >>> comparer.compare()
    """

    def __init__(
        self,
        *,
        trigger: TriggerLike = None,
        compare_fn: CompareFn = _DEFAULT_COMPARE_FN,
        concurrency: int | None = None,
        outputs: bool | Sequence[str] = True,
        params: bool | Sequence[str] = False,
        baseline: str | None = None,
    ) -> None:
        if not callable(compare_fn):
            message = f"compare_fn must be callable, got {compare_fn!r}"
            raise TypeError(message)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            message = f"concurrency must be a positive integer or None, got {concurrency!r}"
            raise ValueError(message)
        if baseline is not None and not isinstance(baseline, str):
            message = f"baseline must be the name of an engine or dump, got {baseline!r}"
            raise TypeError(message)
        self._trigger = get_trigger((1, "iteration") if trigger is None else trigger)
        self._compare_fn = compare_fn
        self._concurrency = concurrency
        self._selection = _Selection(_names(outputs, "outputs"), _names(params, "params"))
        self._baseline = baseline
        self._sources: dict[str, _Member | _Recording] = {}

    def _check_name(self, name: Any) -> None:
        if not isinstance(name, str) or not name:
            message = f"the name must be a non-empty str, got {name!r}"
            raise TypeError(message)
        if name in self._sources:
            message = f"the name {name!r} is already used; the comparer has {list(self._sources)}"
            raise ValueError(message)

    def add_engine(self, name: str, engine: Engine, *args: Any, **kwargs: Any) -> None:
        """Add an engine to compare.

        Args:
            name: Name of the engine in the comparison (and in its errors).
            engine: A trainer or an evaluator; its models must have been moved with
                ``ppe.to``.
            *args: Positional arguments of ``engine.run`` (the loaders).
            **kwargs: Keyword arguments of ``engine.run`` (``train_len``, ``eval_len``...).

        Raises:
            TypeError: ``engine`` is not a trainer or an evaluator.
            ValueError: ``name`` is taken, or ``engine`` (or its handler) was already added.
        """
        self._check_name(name)
        _check_engine(engine)
        for other, source in self._sources.items():
            if isinstance(source, _Member) and source.engine.handler is engine.handler:
                message = f"engine {name!r} is (or shares the handler of) engine {other!r}"
                raise ValueError(message)
        self._sources[name] = _Member(engine, args, kwargs)

    def add_dump(self, name: str, dir: str | PathLike[str]) -> None:
        """Add the values saved by :meth:`dump`, to compare as if an engine recorded them.

        Args:
            name: Name of the dump in the comparison.
            dir: The directory given to :meth:`dump`.

        Raises:
            ValueError: ``name`` is taken, or ``dir`` holds no complete dump.
        """
        self._check_name(name)
        self._sources[name] = _Recording(name, Path(dir))

    def dump(self, engine: Engine, dir: str | PathLike[str], *args: Any, **kwargs: Any) -> None:
        """Run ``engine`` and save what this comparer would compare, to compare it later.

        Each recorded step is saved with ``torch.save`` as ``iteration_<n>.pt`` in ``dir``,
        and an index is written when the run completes (a failed run leaves no usable
        dump). The values must be tensors, numbers, or lists/tuples/dicts of them.

        Args:
            engine: A trainer or an evaluator.
            dir: The directory to save to (created if needed).
            *args: Positional arguments of ``engine.run``.
            **kwargs: Keyword arguments of ``engine.run``.

        Example:
            >>> Comparer(params=True).dump(trainer, "baseline", train_loader)
            >>> comparer = Comparer(params=True)
            >>> comparer.add_dump("baseline", "baseline")
            >>> comparer.add_engine("new", new_trainer, train_loader)
            >>> comparer.compare()
        """
        _check_engine(engine)
        directory = Path(dir)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _INDEX).unlink(missing_ok=True)
        steps: list[int] = []

        def save(name: str, step: int, values: Values) -> None:
            torch.save(values, _step_file(directory, step))
            steps.append(step)

        recorder = _Recorder("dump", engine, self._selection, copy.deepcopy(self._trigger), save)
        with recorder.installed():
            engine.run(*args, **kwargs)
        torch.save({"version": 1, "steps": steps, "total": recorder.steps}, directory / _INDEX)

    def compare(self) -> None:
        """Run the engines and compare them with the baseline.

        Raises:
            AssertionError: Two engines (or dumps) diverge; the message names them, the
                value and the iteration.
            ValueError: Fewer than two engines and dumps, or an unknown ``baseline``.
            Exception: The error an engine raised.
        """
        if len(self._sources) < 2:
            message = f"compare() needs at least two engines or dumps, got {list(self._sources)}"
            raise ValueError(message)
        baseline = next(iter(self._sources)) if self._baseline is None else self._baseline
        source = self._sources.get(baseline)
        if source is None:
            message = (
                f"baseline {baseline!r} is none of the engines and dumps {list(self._sources)}"
            )
            raise ValueError(message)
        reference = source if isinstance(source, _Recording) else _Recording(baseline)
        members = [(n, s) for n, s in self._sources.items() if isinstance(s, _Member)]
        members.sort(key=lambda item: item[0] != baseline)  # the baseline runs first
        dumps = [s for n, s in self._sources.items() if isinstance(s, _Recording) and n != baseline]
        size = self._concurrency or len(members)
        groups = [members[start : start + size] for start in range(0, len(members), size)]
        keep = isinstance(source, _Member) and (len(groups) > 1 or bool(dumps))
        random_state = _RandomState.capture()
        for group in groups:
            random_state.restore()
            self._run_group(group, reference, keep)
        for dump in dumps:
            self._compare_recordings(reference, dump)

    # ------------------------------------------------------------------ running

    def _run_group(
        self, group: list[tuple[str, _Member]], reference: _Recording, keep: bool
    ) -> None:
        live = any(name == reference.name for name, _ in group)

        def settle(arrived: Arrivals) -> None:
            steps = {step for step, _ in arrived.values()}
            if len(steps) > 1:
                at = ", ".join(f"{n!r} at {step}" for n, (step, _) in arrived.items())
                message = f"the engines recorded different iterations: {at}"
                raise AssertionError(message)
            step = steps.pop()
            if live:
                expected = arrived[reference.name][1]
                if keep:
                    reference.add(step, expected)
            else:
                found = reference.get(step)
                if found is None:
                    message = (
                        f"the baseline {reference.name!r} recorded nothing at iteration {step}, "
                        f"which {list(arrived)} recorded"
                    )
                    raise AssertionError(message)
                expected = found
            for name, (_, values) in arrived.items():
                if name != reference.name:
                    self._check(reference.name, name, step, expected, values)

        lock_step = _LockStep([name for name, _ in group], settle)
        runs = [
            (
                member,
                _Recorder(
                    name,
                    member.engine,
                    self._selection,
                    copy.deepcopy(self._trigger),
                    lock_step.arrive,
                ),
            )
            for name, member in group
        ]
        if len(runs) == 1:
            _run(*runs[0], lock_step)
        else:
            threads = [
                threading.Thread(
                    target=_run, args=(*run, lock_step), name=f"comparer-{run[1].name}", daemon=True
                )
                for run in runs
            ]
            for thread in threads:
                thread.start()
            try:
                for thread in threads:
                    thread.join()
            except BaseException as error:  # KeyboardInterrupt: stop the engines, too
                lock_step.abort(error)
                raise
        if lock_step.failure is not None:
            raise lock_step.failure
        if live:
            reference.total = lock_step.totals[reference.name]
        for name, total in lock_step.totals.items():
            if total != reference.total:
                message = (
                    f"{name!r} ran {total} iterations but the baseline {reference.name!r} "
                    f"ran {reference.total}"
                )
                raise AssertionError(message)

    def _compare_recordings(self, reference: _Recording, other: _Recording) -> None:
        if reference.steps != other.steps or reference.total != other.total:
            message = (
                f"{other.name!r} recorded {len(other.steps)} of {other.total} iterations, "
                f"the baseline {reference.name!r} {len(reference.steps)} of {reference.total}"
            )
            raise AssertionError(message)
        for step in reference.steps:
            self._check(
                reference.name,
                other.name,
                step,
                cast("Values", reference.get(step)),
                cast("Values", other.get(step)),
            )

    def _check(self, baseline: str, name: str, step: int, expected: Values, values: Values) -> None:
        missing = [key for key in expected if key not in values]
        extra = [key for key in values if key not in expected]
        if missing or extra:
            problems = []
            if missing:
                problems.append(f"it has no {missing}")
            if extra:
                problems.append(f"it has {extra}, which the baseline has not")
            message = f"{name!r} diverges from {baseline!r} at iteration {step}: " + "; ".join(
                problems
            )
            raise AssertionError(message)
        for key, value in expected.items():
            try:
                self._compare_fn(baseline, name, key, value, values[key])
            except AssertionError as error:
                message = (
                    f"{name!r} diverges from {baseline!r} at iteration {step} on {key!r}: {error}"
                )
                raise AssertionError(message) from error


def _run(member: _Member, recorder: _Recorder, lock_step: _LockStep) -> None:
    """Run one engine of a group (in its own thread when the group has several)."""
    error: BaseException | None = None
    try:
        with recorder.installed():
            member.engine.run(*member.args, **member.kwargs)
    except BaseException as caught:  # handed to the group, re-raised by compare()
        error = caught
    finally:
        lock_step.leave(recorder.name, recorder.steps, error)


class _EngineDictComparer(Comparer):
    """The comparers of older PPE versions: engines by name, loaders given to ``compare``."""

    def __init__(
        self,
        engines: Mapping[str, Engine],
        *,
        outputs: bool | Sequence[str],
        params: bool | Sequence[str],
        compare_fn: CompareFn,
        concurrency: int | None,
    ) -> None:
        super().__init__(
            compare_fn=compare_fn, concurrency=concurrency, outputs=outputs, params=params
        )
        if not isinstance(engines, Mapping):
            message = f"engines must be a dict of engines by name, got {type(engines).__name__}"
            raise TypeError(message)
        for name, engine in engines.items():
            self.add_engine(name, engine)
        self._given = list(engines)

    def compare(self, *loaders: Any, **run_kwargs: Any) -> None:
        """Run the engines on the loaders and compare them.

        Args:
            *loaders: Positional arguments of every engine's ``run`` (the same loaders for
                all), or a single dict by engine name whose values are each engine's
                loader, or a tuple of its positional arguments.
            **run_kwargs: Keyword arguments of every engine's ``run``.

        Raises:
            AssertionError: The engines diverge.

        Example:
            >>> comparer.compare(train_loader)
            >>> comparer.compare({"cpu": (cpu_loader,), "cuda": (cuda_loader,)})
        """
        if loaders or run_kwargs:
            first = loaders[0] if len(loaders) == 1 else None
            per_engine = isinstance(first, Mapping) and set(first) == set(self._given)
            for name in self._given:
                args = loaders
                if per_engine:
                    given = cast("Mapping[str, Any]", first)[name]
                    args = given if isinstance(given, tuple) else (given,)
                member = cast("_Member", self._sources[name])
                self._sources[name] = member._replace(args=args, kwargs=dict(run_kwargs))
        super().compare()


class OutputsComparer(_EngineDictComparer):
    """Compare the step outputs of engines (PPE's older API; see :class:`Comparer`).

    Args:
        engines: The engines (trainers or evaluators) by name; the first is the baseline.
        to_compare_keys: The output keys to compare (a str or a list); all by default.
        compare_fn: See :func:`get_default_comparer`.
        concurrency: How many engines run at once; all of them by default.

    Example:
        >>> comparer = OutputsComparer({"cpu": cpu_trainer, "cuda": cuda_trainer}, "loss")
        >>> comparer.compare(train_loader)
    """

    def __init__(
        self,
        engines: Mapping[str, Engine],
        to_compare_keys: str | Sequence[str] | None = None,
        *,
        compare_fn: CompareFn = _DEFAULT_COMPARE_FN,
        concurrency: int | None = None,
    ) -> None:
        keys = True if to_compare_keys is None else to_compare_keys
        super().__init__(
            engines, outputs=keys, params=False, compare_fn=compare_fn, concurrency=concurrency
        )


class ModelComparer(_EngineDictComparer):
    """Compare the parameters of engines after every step (PPE's older API).

    Args:
        engines: The engines (trainers) by name; the first is the baseline.
        to_compare_keys: The ``"<model>/<parameter>"`` names to compare; all by default.
        compare_fn: See :func:`get_default_comparer`.
        concurrency: How many engines run at once; all of them by default.

    Example:
        >>> comparer = ModelComparer({"cpu": cpu_trainer, "cuda": cuda_trainer})
        >>> comparer.compare(train_loader)
    """

    def __init__(
        self,
        engines: Mapping[str, Engine],
        to_compare_keys: str | Sequence[str] | None = None,
        *,
        compare_fn: CompareFn = _DEFAULT_COMPARE_FN,
        concurrency: int | None = None,
    ) -> None:
        keys = True if to_compare_keys is None else to_compare_keys
        super().__init__(
            engines, outputs=False, params=keys, compare_fn=compare_fn, concurrency=concurrency
        )
