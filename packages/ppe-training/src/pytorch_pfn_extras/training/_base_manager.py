"""The manager logic shared by :class:`ExtensionsManager` and the Ignite manager."""

from __future__ import annotations

import logging
import os
import time
import types
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch

from pytorch_pfn_extras.reporting import Reporter
from pytorch_pfn_extras.training._engine._run_state import RunState
from pytorch_pfn_extras.training._extension import ExtensionEntry, ExtensionLike
from pytorch_pfn_extras.training._manager_extensions import _ExtensionRegistry, _Runner
from pytorch_pfn_extras.training._manager_state_dict import _ManagerStateDict
from pytorch_pfn_extras.training._manager_state_dict import ppe_version as ppe_version
from pytorch_pfn_extras.training._manager_util import (
    ModelsLike,
    OptimizersLike,
    TransformModel,
    as_dict,
    as_optimizers,
    check_state_objects,
)
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger
from pytorch_pfn_extras.training._writer_util import check_writer, finalize_writer
from pytorch_pfn_extras.writing import SimpleWriter, Writer

__all__ = ["ModelsLike", "OptimizersLike", "TransformModel", "_BaseExtensionsManager"]

logger = logging.getLogger("pytorch_pfn_extras.training.manager")


class _StopRequest(NamedTuple):
    """A stop asked with :meth:`_BaseExtensionsManager.request_stop`."""

    reason: str
    preempted: bool


class _BaseExtensionsManager(_ExtensionRegistry, _ManagerStateDict):
    """State, extensions and the per-iteration machinery of a training loop.

    Subclasses decide where iterations come from (a user's loop, the trainer, an Ignite
    engine); they advance :attr:`run_state` and call :meth:`_begin_iteration`,
    :meth:`_end_iteration` and :meth:`_fail_iteration` around each one. The extension
    registry (:meth:`extend`, :meth:`run_extensions`...) is in ``_manager_extensions``, the
    state (:meth:`state_dict`, :meth:`load_state_dict`...) in ``_manager_state_dict``.
    """

    def __init__(
        self,
        models: ModelsLike,
        optimizers: OptimizersLike,
        max_epochs: float,
        extensions: Iterable[ExtensionLike] | None = None,
        out_dir: str | os.PathLike[str] = "result",
        writer: Writer | None = None,
        stop_trigger: TriggerLike = None,
        transform_model: TransformModel = lambda n, x: x,
        enable_profile: bool = False,
        enable_trace: bool = False,
        state_objects: Mapping[str, Any] | None = None,
        *,
        epoch_length: int | None,
    ) -> None:
        self._raw_models: dict[str, torch.nn.Module] = as_dict(models, "models", torch.nn.Module)
        self._optimizers: dict[str, torch.optim.Optimizer] = as_optimizers(optimizers)
        self._models = {name: transform_model(name, m) for name, m in self._raw_models.items()}
        self._state_objects = check_state_objects(state_objects)
        if stop_trigger is None:
            if isinstance(max_epochs, bool) or not isinstance(max_epochs, (int, float)):
                message = f"max_epochs must be a positive number, got {max_epochs!r}"
                raise TypeError(message)
            if max_epochs <= 0:
                message = f"max_epochs must be positive, got {max_epochs!r}"
                raise ValueError(message)
            stop_trigger = (max_epochs, "epoch")
        self._stop_trigger: Trigger = get_trigger(stop_trigger)
        self.max_epochs = max_epochs
        self._out = os.fspath(out_dir)
        if writer is not None:
            check_writer(writer, type(self).__name__)
        self._writer = writer if writer is not None else SimpleWriter(out_dir=self._out)
        self._enable_profile = enable_profile
        self._enable_trace = enable_trace

        self._run = RunState(epoch_length)
        self._observation: dict[str, Any] = {}
        self._reporter = Reporter()
        # Raw models first: names under the transformed models win (``main/x``, not
        # ``main/module/x`` for a DDP-wrapped model unwrapped by transform_model).
        for name, model in self._raw_models.items():
            if model is not self._models[name]:
                self._add_observers(name, model)
        for name, model in self._models.items():
            self._add_observers(name, model)

        self._extensions: dict[str, ExtensionEntry] = {}
        self._started = False
        self._finalized = False
        self._failed = False
        self._in_iteration = False
        self._in_extensions = False  # run_extensions() is running (models access is checked)
        self._models_held_at = -1  # the last iteration whose model state was found held
        self._start_time: float | None = None
        self._elapsed_before = 0.0
        self._stop_iteration = -1
        self._stop_result = False
        self._stop_request: _StopRequest | None = None  # set by request_stop
        self._previous_observation: dict[str, Any] = {}
        self._entries: list[ExtensionEntry] = []
        self._runners_before_stop: list[_Runner] = []
        self._runners_after_stop: list[_Runner] = []
        for extension in extensions or ():
            self.extend(extension)

    def _add_observers(self, name: str, model: torch.nn.Module) -> None:
        self._reporter.add_observer(name, model)
        self._reporter.add_observers(
            name + "/", [(sub, module) for sub, module in model.named_modules() if sub]
        )

    # ------------------------------------------------------------------ properties

    @property
    def models(self) -> dict[str, torch.nn.Module]:
        """The models by name, after ``transform_model`` (what snapshots save).

        Raises:
            RuntimeError: Read by an extension in an iteration where no running extension
                declares ``needs_model_state = True``: the manager tells runtimes which
                iterations need the model state through that flag, so in other iterations
                the models may not hold it (as in PPE).
        """
        if self._in_extensions and self._models_held_at != self.iteration:
            if self.needs_model_state(self.iteration):
                self._models_held_at = self.iteration  # asked once per iteration
                return self._models
            message = (
                f"manager.models was read by an extension at iteration {self.iteration}, where "
                "no extension declares needs_model_state = True, so the model state is not "
                "held; set `needs_model_state = True` on the extension that reads the models "
                "(a class attribute, or make_extension(needs_model_state=True))"
            )
            raise RuntimeError(message)
        return self._models

    @property
    def raw_models(self) -> dict[str, torch.nn.Module]:
        """The models by name, as given."""
        return self._raw_models

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by name."""
        return self._optimizers

    @property
    def state_objects(self) -> dict[str, Any]:
        """Other objects whose state is saved (schedulers, grad scalers...), by name."""
        return self._state_objects

    @property
    def out(self) -> str:
        """The output directory."""
        return self._out

    @property
    def writer(self) -> Writer:
        """The writer extensions use to write files into :attr:`out`."""
        return self._writer

    @property
    def reporter(self) -> Reporter:
        """The manager's reporter (models are registered as observers)."""
        return self._reporter

    @property
    def observation(self) -> dict[str, Any]:
        """Values reported during the current iteration (the last one, between iterations).

        It can be assigned (a dict), e.g. by an extension that replaces what the following
        extensions of the iteration read.
        """
        return self._observation

    @observation.setter
    def observation(self, value: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            message = f"manager.observation must be a dict, got {type(value).__name__}"
            raise TypeError(message)
        self._observation = value

    @property
    def run_state(self) -> RunState:
        """Where training stands: the iteration count and the epoch length, in one place."""
        return self._run

    @property
    def iteration(self) -> int:
        """Number of completed iterations."""
        return self._run.iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        self._run.iteration = value

    @property
    def iters_per_epoch(self) -> int:
        """Number of iterations in one epoch.

        Raises:
            RuntimeError: The run has not begun (the trainer's and the Ignite manager's
                learn it from their data then).
        """
        return self._run.known_epoch_length()

    @property
    def epoch(self) -> int:
        """Number of completed epochs."""
        return self._run.epoch

    @property
    def epoch_detail(self) -> float:
        """Completed epochs, fractional."""
        return self._run.epoch_detail

    @property
    def is_before_training(self) -> bool:
        """True until the first iteration completes."""
        return self.iteration == 0

    @property
    def elapsed_time(self) -> float:
        """Seconds of training so far, including the time before a resume.

        Raises:
            RuntimeError: Training has not started.
        """
        if self._start_time is None:
            message = "elapsed_time is not available before training starts"
            raise RuntimeError(message)
        return time.perf_counter() - self._start_time + self._elapsed_before

    @property
    def updater(self) -> _BaseExtensionsManager:
        """The manager itself (for extensions written for Chainer's ``trainer.updater``)."""
        return self

    @property
    def stop_trigger(self) -> bool:
        """Whether training has finished: loop with ``while not manager.stop_trigger``.

        Reading it starts the extensions (loading a snapshot if one autoloads), so a run
        resumed after it finished does no further iteration. The stop trigger is evaluated
        at most once per iteration; when it fires the extensions are finalized. It is also
        true after an iteration failed.
        """
        if self._failed:
            return True
        if not self._started:
            self.start_extensions()
        stop = self._stops()
        if stop and not self._finalized:
            self.finalize()
        return stop

    def request_stop(self, reason: str, *, preempted: bool = False) -> None:
        """End training after the running iteration, whatever the stop trigger says.

        Called during an iteration (by an extension, or the iteration's code), training
        ends when the iteration completes: the extensions of that iteration run, then
        :attr:`stop_trigger` is true and the extensions are finalized. Called between
        iterations, the next read of :attr:`stop_trigger` ends it. The stop trigger's own
        state is left as it is, so a snapshot records it and a resumed run goes on.
        A second request keeps the first one's reason.

        Args:
            reason: Why, for messages (e.g. ``"preempted (SIGTERM was received by rank
                1)"``).
            preempted: The job is being stopped from outside (what
                :class:`~pytorch_pfn_extras.training.extensions.PreemptionHandler` says):
                the next :meth:`run_iteration` after the stop ends the process with
                ``SystemExit(0)`` instead of raising ``RuntimeError``, so that the nested
                loop ``while not manager.stop_trigger: for batch in loader: with
                manager.run_iteration(): ...`` exits cleanly in the middle of an epoch.

        Raises:
            TypeError: ``reason`` is not a str, or ``preempted`` not a bool.

        Example:
            >>> if loss_is_nan:
            ...     manager.request_stop("the loss became NaN")
        """
        if not isinstance(reason, str):
            message = f"request_stop(reason) must be a str saying why, got {reason!r}"
            raise TypeError(message)
        if not isinstance(preempted, bool):
            message = f"request_stop(preempted=) must be a bool, got {preempted!r}"
            raise TypeError(message)
        request = self._stop_request
        if request is None:
            self._stop_request = _StopRequest(reason, preempted)
        elif preempted and not request.preempted:
            self._stop_request = _StopRequest(request.reason, True)

    def _stops(self) -> bool:
        """Whether training ends at this iteration: the stop trigger, or a requested stop."""
        return self._evaluate_stop_trigger() or self._stop_request is not None

    def _evaluate_stop_trigger(self) -> bool:
        iteration = self._run.iteration
        if self._stop_iteration != iteration:
            self._stop_result = bool(self._stop_trigger(self))
            self._stop_iteration = iteration
        return self._stop_result

    # ------------------------------------------------------------------ iterations

    def _check_can_iterate(self) -> None:
        if self._in_iteration:
            message = "run_iteration() cannot be nested: an iteration is already running"
            raise RuntimeError(message)
        if self._failed:
            message = (
                "training failed (an iteration, or starting the extensions, raised); the "
                "extensions were finalized and training cannot go on"
            )
            raise RuntimeError(message)
        request = self._stop_request
        if request is not None and request.preempted:
            # The job is being stopped from outside: end the process cleanly rather than
            # fail the loop that asks for a further iteration (the nested loop does).
            if not self._finalized:
                self.finalize()
            logger.info(
                "run_iteration() after training stopped at iteration %d (%s): exiting "
                "with SystemExit(0); to run code after the loop, end it with "
                "`if manager.stop_trigger: break` before run_iteration()",
                self.iteration,
                request.reason,
            )
            raise SystemExit(0)
        if self._finalized:
            why = "the stop trigger fired" if request is None else request.reason
            message = (
                f"training has finished ({why} at iteration {self.iteration}); "
                "stop the loop there: `while not manager.stop_trigger:`, and when training can "
                "end mid-epoch, `if manager.stop_trigger: break` before run_iteration()"
            )
            raise RuntimeError(message)

    def _begin_iteration(self) -> None:
        """Open a fresh observation and make the manager's reporter current.

        This is ``reporter.scope(observation)`` unrolled (two calls instead of a generator).
        """
        observation: dict[str, Any] = {}
        self._observation = observation
        reporter = self._reporter
        self._previous_observation = reporter.observation
        reporter.observation = observation
        reporter.__enter__()
        self._in_iteration = True

    def _close_scope(self) -> None:
        if not self._in_iteration:
            return
        self._in_iteration = False
        reporter = self._reporter
        reporter.__exit__(None, None, None)
        reporter.observation = self._previous_observation
        self._previous_observation = {}

    def _end_iteration(self) -> None:
        """Run the extensions of the iteration just counted, close it; finalize at the end."""
        self.run_extensions()
        stop = self._stops()
        self._close_scope()
        if stop:
            self.finalize()

    def _fail_iteration(self, exc: BaseException, tb: types.TracebackType | None) -> None:
        """Handle an exception raised by an iteration: on_error once each, then finalize."""
        self._in_extensions = False
        try:
            self._close_scope()
        except Exception:  # the original error matters more
            pass
        if self._failed:
            return
        self._failed = True
        for entry in self._entries:
            on_error = getattr(entry.extension, "on_error", None)
            if on_error is None:
                continue
            try:
                on_error(self, exc, tb)
            except Exception as handler_error:
                message = (
                    f"the on_error handler of extension {entry.name!r} raised "
                    f"{handler_error!r} while handling {exc!r}"
                )
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        self._finalize(raise_errors=False)

    def finalize(self) -> None:
        """End training: every extension's ``on_stop``, then its finalizer, then the
        writer's (once).

        Called automatically when the stop trigger fires, a stop was requested, or an
        iteration fails. ``on_stop`` runs only when training started and did not fail: an
        extension may still save there, with every rank (the
        :class:`~pytorch_pfn_extras.training.extensions.PreemptionHandler` does).

        Raises:
            Exception: The first error an ``on_stop`` or a finalizer raised, after every
                finalizer ran.
        """
        self._finalize(raise_errors=True)

    def _finalize(self, raise_errors: bool) -> None:
        if self._finalized:
            return
        self._finalized = True
        errors: list[tuple[str, Exception]] = []
        if self._started and not self._failed:
            for entry in self._entries:
                on_stop = getattr(entry.extension, "on_stop", None)
                if on_stop is None:
                    continue
                try:
                    on_stop(self)
                except Exception as error:
                    errors.append((entry.name, error))
        for entry in self._entries or self._sorted_entries():
            finalize = getattr(entry.extension, "finalize", None)
            if finalize is None:
                continue
            try:
                finalize(self)
            except Exception as error:
                errors.append((entry.name, error))
        try:
            finalize_writer(self._writer)
        except Exception as error:
            errors.append(("writer", error))
        if not errors:
            return
        if raise_errors:
            raise errors[0][1]
        for name, failure in errors:
            message = f"finalizing {name!r} after a failed iteration raised {failure!r}"
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------------ model state

    def needs_model_state(self, iteration: int | None = None) -> bool:
        """Whether an extension reading the model state may run at ``iteration``.

        Args:
            iteration: The iteration to ask about; the current one by default.
        """
        if iteration is None:
            iteration = self.iteration
        epoch_length = self._run.known_epoch_length()
        return any(
            entry.needs_model_state and entry.trigger.may_fire(iteration, epoch_length)
            for entry in self._extensions.values()
        )

    def needs_state_this_iteration(self) -> bool:
        """Whether an extension reading the model state may run after the running iteration."""
        return self.needs_model_state(self.iteration + 1)
