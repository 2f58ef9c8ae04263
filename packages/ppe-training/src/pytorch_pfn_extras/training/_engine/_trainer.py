"""The trainer engine: the training loop of a handler, on an extensions manager."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from pytorch_pfn_extras.training._base_manager import _BaseExtensionsManager
from pytorch_pfn_extras.training._engine._evaluator import Evaluator, sized_length
from pytorch_pfn_extras.training._engine._run_state import RunState
from pytorch_pfn_extras.training._engine._trainer_position import TrainerPosition
from pytorch_pfn_extras.training._extension import PRIORITY_WRITER, ExtensionLike
from pytorch_pfn_extras.training._manager import ExtensionsManager
from pytorch_pfn_extras.training._manager_util import ModelsLike, as_dict, check_optimizer
from pytorch_pfn_extras.training._trigger_util import TriggerLike

EvaluatorsLike = (
    Evaluator
    | tuple[Evaluator, TriggerLike]
    | Mapping[str, "Evaluator | tuple[Evaluator, TriggerLike]"]
    | None
)


class _Validation:
    """The validation data of the current run: a loader per evaluator, and ``eval_len``."""

    def __init__(self) -> None:
        self.loaders: dict[str, Any] = {}
        self.eval_len: int | None = None


class _EvaluatorExtension:
    """Runs one of the trainer's evaluators as an extension of its manager."""

    priority = PRIORITY_WRITER
    needs_model_state = True

    def __init__(
        self, trainer: Trainer, name: str, evaluator: Evaluator, validation: _Validation
    ) -> None:
        self._trainer = trainer
        self._name = name
        self._evaluator = evaluator
        self._validation = validation

    def __call__(self, manager: Any) -> None:
        trainer, evaluator, validation = self._trainer, self._evaluator, self._validation
        loader, eval_len = validation.loaders[self._name], validation.eval_len
        trainer.handler.train_validation_begin(trainer, evaluator)
        try:
            evaluator.run(loader, eval_len=eval_len)
        finally:
            trainer.handler.train_validation_end(trainer, evaluator)


class _TrainerManager(ExtensionsManager):
    """The trainer's manager: its epoch length is the run's, known when :meth:`Trainer.run`
    begins, and its state also holds the trainer's position in the epoch.

    It takes ExtensionsManager's arguments but ``iters_per_epoch``, so it is initialized
    as the base manager is, with an epoch length still unknown.
    """

    def __init__(self, position: TrainerPosition, models: ModelsLike, **kwargs: Any) -> None:
        _BaseExtensionsManager.__init__(self, models, epoch_length=None, **kwargs)
        self._position = position

    def rank_state_dict(self) -> dict[str, Any]:
        # The trainer's position (random states, a stateful loader's) may differ per rank.
        state = super().rank_state_dict()
        state["trainer"] = self._position.state_dict()
        return state

    def load_rank_state_dict(self, to_load: Mapping[str, Any]) -> None:
        super().load_rank_state_dict(_renamed_state_objects(to_load, self.state_objects))
        self._position.load_state_dict(to_load.get("trainer"))

    def abort(self, error: BaseException) -> None:
        """Fail training on an error raised outside an iteration (by a loader, a handler
        callback...): the extensions' ``on_error`` and finalizers run, as for an iteration."""
        if not self._failed and not self._finalized:
            self._fail_iteration(error, error.__traceback__)


def _renamed_state_objects(
    to_load: Mapping[str, Any], registered: Mapping[str, Any]
) -> Mapping[str, Any]:
    """``to_load`` with its state objects saved under the names of ppe-training 0.1
    (``option/grad_scaler``) renamed to PPE's (``option__::__grad_scaler``), which the
    trainer uses now (see ``ppe.engine.filter_state_objects``)."""
    saved = to_load.get("state_objects")
    if not saved:
        return to_load
    old_names = {
        re.sub(r"\.__(\d+)__", r"/\1", name.replace("__::__", "/")): name
        for name in registered
        if name not in saved
    }
    if not old_names.keys() & saved.keys():
        return to_load
    renamed = {old_names.get(name, name): state for name, state in saved.items()}
    return {**to_load, "state_objects": renamed}


def _evaluator_entries(evaluator: EvaluatorsLike) -> dict[str, tuple[Evaluator, TriggerLike]]:
    if evaluator is None:
        return {}
    if isinstance(evaluator, Mapping):
        items = list(evaluator.items())
    else:
        items = [("Evaluator", evaluator)]
    entries: dict[str, tuple[Evaluator, TriggerLike]] = {}
    for name, value in items:
        trigger: TriggerLike = (1, "epoch")
        if isinstance(value, tuple):
            if len(value) != 2:
                message = f"evaluator {name!r} must be an Evaluator or an (Evaluator, trigger) pair, got {value!r}"
                raise TypeError(message)
            value, trigger = value
        if not isinstance(value, Evaluator):
            message = (
                f"evaluator {name!r} must be an Evaluator (made by ppe.engine.create_evaluator), "
                f"got {type(value).__name__}"
            )
            raise TypeError(message)
        entries[str(name)] = (value, trigger)
    return entries


class Trainer:
    """Runs a handler's training steps on an extensions manager, and its evaluators.

    Create it with :func:`pytorch_pfn_extras.engine.create_trainer`. :meth:`run` trains
    until the stop trigger fires: one manager iteration per batch, the evaluators at their
    triggers (after the iteration's step, before the extensions that read the results),
    and the extensions as with :class:`~pytorch_pfn_extras.training.ExtensionsManager`.

    The manager's state (what ``snapshot()`` saves and :meth:`state_dict` returns) also
    holds the trainer's position: the random states at the start of the current epoch and
    at the time of saving. A run resumed from a snapshot taken in the middle of an epoch
    re-creates that epoch's order of batches (a shuffling ``DataLoader`` draws the same
    permutation), skips the batches already trained on, and continues with the random
    state of the moment of the snapshot: it ends with the weights of an uninterrupted run.
    A loader with ``state_dict()``/``load_state_dict()`` (torchdata's
    ``StatefulDataLoader``) is saved with the position and resumes there itself, without
    loading the skipped batches again.

    Args:
        handler: The handler that runs the steps.
        evaluator: An evaluator, an ``(evaluator, trigger)`` pair, a dict of them by name,
            or ``None``. The default trigger is ``(1, 'epoch')``.
        models: A module, or a mapping of names to modules.
        profile: A ``torch.profiler.profile``: :meth:`run` runs inside ``with profile:`` and
            calls ``profile.step()`` after every iteration.
        **kwargs: Arguments of :class:`~pytorch_pfn_extras.training.ExtensionsManager`
            (``optimizers``, ``max_epochs``, ``extensions``, ``out_dir``, ``stop_trigger``,
            ``writer``, ``transform_model``, ``state_objects``...), except
            ``iters_per_epoch``, which :meth:`run` takes from the loader.
    """

    def __init__(
        self,
        handler: Any,
        *,
        evaluator: EvaluatorsLike,
        models: ModelsLike,
        profile: Any = None,
        **kwargs: Any,
    ) -> None:
        if "iters_per_epoch" in kwargs:
            message = "the trainer takes iters_per_epoch from the loader (or run(train_len=)); do not pass it"
            raise TypeError(message)
        self.handler = handler
        self._models: dict[str, torch.nn.Module] = as_dict(models, "models", torch.nn.Module)
        self._evaluators = _evaluator_entries(evaluator)
        self._profile = profile
        self._position = TrainerPosition()
        self._validation = _Validation()
        self._manager = _TrainerManager(self._position, self._models, **kwargs)
        for name, (evaluator_object, trigger) in self._evaluators.items():
            self._manager.extend(
                _EvaluatorExtension(self, name, evaluator_object, self._validation),
                name=name,
                trigger=trigger,
            )
        self._batch: Any = None
        self._completed = False

    # ------------------------------------------------------------------ properties

    @property
    def manager(self) -> ExtensionsManager:
        """The extensions manager that runs the extensions and holds the training state."""
        return self._manager

    @property
    def models(self) -> dict[str, torch.nn.Module]:
        """The models by name, as given (the logic trains these)."""
        return self._models

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by name."""
        return self._manager.optimizers

    @property
    def evaluators(self) -> dict[str, tuple[Evaluator, TriggerLike]]:
        """The evaluators and their triggers, by name."""
        return dict(self._evaluators)

    @property
    def epoch(self) -> int:
        """Number of completed epochs."""
        return self._manager.epoch

    @property
    def epoch_detail(self) -> float:
        """Completed epochs, fractional."""
        return self._manager.epoch_detail

    @property
    def iteration(self) -> int:
        """Number of completed iterations."""
        return self._manager.iteration

    @property
    def run_state(self) -> RunState:
        """Where training stands: the iteration count and the epoch length (the manager's)."""
        return self._manager.run_state

    @property
    def train_len(self) -> int | None:
        """Iterations per epoch of the current run (``None`` before :meth:`run`)."""
        return self._manager.run_state.epoch_length

    def get_optimizer(self, name: str) -> torch.optim.Optimizer:
        """Return the optimizer named ``name``."""
        return self._manager.optimizers[name]

    def set_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        """Replace (or add) the optimizer named ``name``."""
        check_optimizer(optimizer, f"optimizer {name!r}")
        self._manager.optimizers[name] = optimizer

    def is_epoch_last_iter(self, idx: int) -> bool:
        """Whether the batch index ``idx`` is the last of the epoch."""
        return self._manager.run_state.is_last_of_epoch(idx)

    def extend(
        self,
        extension: ExtensionLike,
        name: str | None = None,
        trigger: TriggerLike = None,
        priority: int | None = None,
        *,
        call_before_training: bool = False,
        **kwargs: Any,
    ) -> None:
        """Register an extension with the manager (see ``ExtensionsManager.extend``).

        Raises:
            TypeError: An unknown keyword argument.
        """
        if kwargs:
            message = f"extend() got unexpected keyword arguments {sorted(kwargs)}"
            raise TypeError(message)
        self._manager.extend(
            extension,
            name=name,
            trigger=trigger,
            priority=priority,
            call_before_training=call_before_training,
        )

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """Return the training state (the manager's, with the trainer's position)."""
        return self._manager.state_dict()

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict` (or saved by ``snapshot()``)."""
        self._manager.load_state_dict(to_load)

    # ------------------------------------------------------------------ running

    def _check_loaders(self, val_loader: Any) -> None:
        if not self._evaluators:
            if val_loader is not None:
                message = "val_loader is given but the trainer has no evaluator; it is not used"
                warnings.warn(message, UserWarning, stacklevel=3)
            return
        names = sorted(self._evaluators)
        if val_loader is None:
            message = (
                f"the trainer has evaluator(s) {names} with a trigger but run() got no "
                "val_loader; pass run(train_loader, val_loader)"
            )
            raise ValueError(message)
        if isinstance(val_loader, Mapping):
            missing = sorted(set(names) - set(val_loader))
            unknown = sorted(set(val_loader) - set(names))
            if missing or unknown:
                message = (
                    f"a dict of validation loaders must have one loader per evaluator {names}; "
                    f"missing {missing}, unknown {unknown}"
                )
                raise ValueError(message)
            self._validation.loaders = dict(val_loader)
        else:
            self._validation.loaders = dict.fromkeys(names, val_loader)

    def run(
        self,
        train_loader: Iterable[Any],
        val_loader: Any = None,
        *,
        train_len: int | None = None,
        eval_len: int | None = None,
    ) -> None:
        """Train until the stop trigger fires (a finished or resumed-finished run does nothing).

        Args:
            train_loader: The training data: a DataLoader or any iterable of batches.
            val_loader: The validation data of the evaluators (one loader, or a dict by
                evaluator name).
            train_len: Iterations per epoch; required when ``train_loader`` has no ``len()``.
                When the loader runs out before, it is iterated again.
            eval_len: Batches per evaluation; the whole validation loader by default.

        Raises:
            ValueError: ``train_len`` is needed and missing, or differs from the length of
                a run that already started; evaluators without ``val_loader``.
            RuntimeError: A model was not moved with ``ppe.to``.
        """
        length = sized_length(train_loader, train_len, "train_len")
        if length is None:
            message = (
                f"the training loader ({type(train_loader).__name__}) has no len(); pass the "
                "number of iterations per epoch: trainer.run(loader, train_len=N)"
            )
            raise ValueError(message)
        if length == 0:
            message = "the training loader is empty (len() == 0); nothing to train on"
            raise ValueError(message)
        manager = self._manager
        manager.run_state.begin(length)
        self._check_loaders(val_loader)
        self._validation.eval_len = eval_len
        self._position.loader = train_loader
        self.handler.train_setup(self, train_loader)
        with _profiling(self._profile):
            try:
                while not manager.stop_trigger:
                    self._run_epoch(train_loader)
            except BaseException as error:
                manager.abort(error)
                raise
        self.handler.train_cleanup(self)

    def _complete_step(self, batch_idx: int, outputs: Any) -> None:
        self._completed = True
        self.handler.train_post_step(self, batch_idx, self._batch, outputs)

    def _run_epoch(self, loader: Iterable[Any]) -> None:
        manager = self._manager
        handler = self.handler
        profile = self._profile
        run = manager.run_state
        length = run.known_epoch_length()
        position = run.iteration % length
        handler.train_epoch_begin(self, loader)
        iterator = self._position.epoch_iterator(loader, position)
        try:
            for batch_idx in range(position, length):
                if batch_idx != position and manager.stop_trigger:
                    break  # an iteration-based stop trigger fired in the middle of the epoch
                try:
                    batch = next(iterator)
                except StopIteration:
                    iterator = iter(loader)
                    batch = next(iterator, _EMPTY)
                    if batch is _EMPTY:
                        message = "the training loader yielded no batch"
                        raise RuntimeError(message) from None
                self._batch = batch
                self._completed = False
                with manager.run_iteration():
                    handler.train_step(self, batch_idx, batch, self._complete_step)
                    if not self._completed:
                        message = (
                            f"{type(handler).__name__}.train_step() returned without calling "
                            f"complete_fn for batch {batch_idx}"
                        )
                        raise RuntimeError(message)
                if profile is not None:
                    profile.step()
        finally:
            self._batch = None
        handler.train_epoch_end(self)


_EMPTY = object()


def _profiling(profile: Any) -> contextlib.AbstractContextManager[Any]:
    """The run's profile as a context (a ``torch.profiler.profile`` is started and stopped
    around the run, as in PPE), or no context for an object with only ``step()``."""
    if profile is None or not hasattr(type(profile), "__enter__"):
        return contextlib.nullcontext()
    return profile  # type: ignore[no-any-return]
