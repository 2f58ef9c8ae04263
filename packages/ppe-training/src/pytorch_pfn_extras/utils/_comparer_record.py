"""Recording an engine's values: the recorder that hooks its handler, and recordings kept.

A :class:`_Recorder` asks the comparer's trigger at every step (with a :class:`_Position`
in place of a manager) and hands the values of the steps it selects to a sink: the
lock-step of a group, or the files of a dump. A :class:`_Recording` holds the baseline's
values in memory, or reads those of a dump from its directory.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import torch

from pytorch_pfn_extras.training import Trainer
from pytorch_pfn_extras.utils._comparer_values import Engine, Values, _capture, _Selection

if TYPE_CHECKING:
    from pytorch_pfn_extras.training import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._trigger_util import Trigger

_INDEX = "comparer_index.pt"


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


def _dump(
    engine: Engine,
    directory: Path,
    selection: _Selection,
    trigger: Trigger,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """Run ``engine`` and save the values of each triggered step in ``directory``, then the index."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _INDEX).unlink(missing_ok=True)
    steps: list[int] = []

    def save(name: str, step: int, values: Values) -> None:
        torch.save(values, _step_file(directory, step))
        steps.append(step)

    recorder = _Recorder("dump", engine, selection, copy.deepcopy(trigger), save)
    with recorder.installed():
        engine.run(*args, **kwargs)
    torch.save({"version": 1, "steps": steps, "total": recorder.steps}, directory / _INDEX)
