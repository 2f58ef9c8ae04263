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

Split into private modules: :mod:`._comparer_values` (naming, copying and comparing
values, :func:`intermediate_value`), :mod:`._comparer_record` (the recorder and
recordings), :mod:`._comparer_sync` (random states, lock-step) and :mod:`._comparer_run`
(running a group of engines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training import get_trigger
from pytorch_pfn_extras.utils._comparer_record import _dump, _Recording
from pytorch_pfn_extras.utils._comparer_run import (
    _check_engine,
    _compare_recordings,
    _Member,
    _run_group,
)
from pytorch_pfn_extras.utils._comparer_sync import _RandomState
from pytorch_pfn_extras.utils._comparer_values import (
    _DEFAULT_COMPARE_FN,
    CompareFn,
    Engine,
    _names,
    _Selection,
    get_default_comparer,
    intermediate_value,
)

if TYPE_CHECKING:
    from os import PathLike

    from pytorch_pfn_extras.training._trigger_util import TriggerLike

__all__ = [
    "Comparer",
    "ModelComparer",
    "OutputsComparer",
    "get_default_comparer",
    "intermediate_value",
]


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
        if concurrency is not None and (not is_int(concurrency) or concurrency < 1):
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
        _dump(engine, Path(dir), self._selection, self._trigger, args, kwargs)

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
            _run_group(group, reference, keep, self._selection, self._trigger, self._compare_fn)
        for dump in dumps:
            _compare_recordings(reference, dump, self._compare_fn)


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
