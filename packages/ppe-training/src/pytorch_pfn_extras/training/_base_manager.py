"""The manager logic shared by :class:`ExtensionsManager` and the Ignite manager."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import time
import types
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from pytorch_pfn_extras.reporting import Reporter
from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, ExtensionEntry, ExtensionLike
from pytorch_pfn_extras.training._manager_util import (
    ModelsLike,
    OptimizersLike,
    TransformModel,
    as_dict,
    as_optimizers,
    check_state_objects,
    load_matching,
)
from pytorch_pfn_extras.training._run_state import RunState
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger
from pytorch_pfn_extras.training._version import __version__
from pytorch_pfn_extras.training._writer_util import (
    check_writer,
    finalize_writer,
    initialize_writer,
)
from pytorch_pfn_extras.writing import SimpleWriter, Writer

__all__ = ["ModelsLike", "OptimizersLike", "TransformModel", "_BaseExtensionsManager"]

_RESERVED_NAMES = frozenset({"training"})

# (trigger, extension) pairs of the hot loop; the extension is wrapped in a _Recorded
# when profiling, so that one loop serves both.
_Runner = tuple[Trigger, ExtensionLike]


class _Recorded:
    """An extension run inside ``profiler.record(tag)`` (``enable_profile``/``enable_trace``)."""

    __slots__ = ("_enable", "_extension", "_record", "_tag", "_trace")

    def __init__(self, extension: ExtensionLike, tag: str, enable: bool, trace: bool) -> None:
        # Imported only by a profiled manager: the profiler is not needed otherwise.
        from pytorch_pfn_extras.profiler import record

        self._record = record
        self._extension = extension
        self._tag = tag
        self._enable = enable
        self._trace = trace

    def __call__(self, manager: Any) -> Any:
        with self._record(self._tag, enable=self._enable, trace=self._trace):
            return self._extension(manager)


class _BaseExtensionsManager:
    """State, extensions and the per-iteration machinery of a training loop.

    Subclasses decide where iterations come from (a user's loop, the trainer, an Ignite
    engine); they advance :attr:`run_state` and call :meth:`_begin_iteration`,
    :meth:`_end_iteration` and :meth:`_fail_iteration` around each one.
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
        self._stop_reason: str | None = None  # set by _request_stop (a preemption)
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

    def _request_stop(self, reason: str) -> None:
        """End training after the running iteration, whatever the stop trigger says
        (:class:`~pytorch_pfn_extras.training.extensions.PreemptionHandler`).

        The stop trigger's own state and result are left as they are, so a snapshot records
        them and a resumed run goes on.
        """
        self._stop_reason = reason

    def _stops(self) -> bool:
        """Whether training ends at this iteration: the stop trigger, or a requested stop."""
        return self._evaluate_stop_trigger() or self._stop_reason is not None

    def _evaluate_stop_trigger(self) -> bool:
        iteration = self._run.iteration
        if self._stop_iteration != iteration:
            self._stop_result = bool(self._stop_trigger(self))
            self._stop_iteration = iteration
        return self._stop_result

    # ------------------------------------------------------------------ extensions

    def extend(
        self,
        extension: ExtensionLike | ExtensionEntry,
        name: str | None = None,
        trigger: TriggerLike = None,
        priority: int | None = None,
        *,
        call_before_training: bool = False,
    ) -> None:
        """Register an extension.

        Args:
            extension: An :class:`~pytorch_pfn_extras.training.Extension`, a function
                decorated with :func:`~pytorch_pfn_extras.training.make_extension`, any
                callable taking the manager, or an
                :class:`~pytorch_pfn_extras.training.ExtensionEntry` (the other arguments,
                when given, replace its options).
            name: Its name; ``extension.name``, ``default_name`` or ``__name__`` by default.
                A name already taken gets a suffix: ``"<name>_1"``, ``"<name>_2"``...
            trigger: When to run it; ``extension.trigger`` (else every iteration) by default.
            priority: Higher runs first within an iteration; ``extension.priority`` by default.
            call_before_training: Also run it once before the first iteration of a fresh run.

        Raises:
            RuntimeError: The extensions have already started.
            ValueError: The name is empty or reserved (``'training'``).

        Example:
            >>> manager.extend(extensions.LogReport(), trigger=(1, "epoch"))
        """
        if self._started:
            message = (
                f"cannot extend with {extension!r} after the extensions started (the first "
                "iteration, or manager.stop_trigger, starts them); register extensions before"
            )
            raise RuntimeError(message)
        if isinstance(extension, ExtensionEntry):  # PPE accepts a ready entry
            entry = extension
            extension = entry.extension
            if name is not None:
                entry.name = name
            if priority is not None:
                entry.priority = priority
            if trigger is not None:
                entry.trigger = get_trigger(trigger)
            entry.call_before_training = entry.call_before_training or call_before_training
        else:
            entry = ExtensionEntry(
                extension,
                name=name,
                priority=priority,
                trigger=trigger,
                call_before_training=call_before_training,
            )
        if entry.name in _RESERVED_NAMES:
            message = f"the extension name {entry.name!r} is reserved; pass another name="
            raise ValueError(message)
        base = unique = entry.name
        ordinal = 0
        while unique in self._extensions:
            ordinal += 1
            unique = f"{base}_{ordinal}"
        entry.name = unique
        try:
            extension.name = unique  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # builtins, slotted objects: keep the entry name
            pass
        self._extensions[unique] = entry

    def get_extension(self, name: str) -> Any:
        """Return the extension registered under ``name``.

        Raises:
            ValueError: No extension has that name (the message lists the names).
        """
        entry = self._extensions.get(name)
        if entry is None:
            message = f"no extension named {name!r}; registered: {sorted(self._extensions)}"
            raise ValueError(message)
        return entry.extension

    @property
    def extensions(self) -> list[tuple[str, ExtensionEntry]]:
        """``(name, entry)`` pairs in execution order (priority, then registration)."""
        entries = self._entries if self._started else self._sorted_entries()
        return [(entry.name, entry) for entry in entries]

    def _sorted_entries(self) -> list[ExtensionEntry]:
        return sorted(self._extensions.values(), key=lambda e: -e.priority)

    def _runner(self, entry: ExtensionEntry) -> _Runner:
        extension = entry.extension
        if self._enable_profile or self._enable_trace:
            tag = "extension:" + entry.name
            extension = _Recorded(extension, tag, self._enable_profile, self._enable_trace)
        return (entry.trigger, extension)

    def start_extensions(self) -> None:
        """Start training: load an autoloaded snapshot, initialize extensions, start the clock.

        Called by the first iteration (or the first read of :attr:`stop_trigger`); calling
        it again does nothing. Extensions registered with ``call_before_training=True`` run
        here when training starts from iteration 0.
        """
        if self._started:
            return
        entries = self._sorted_entries()
        self._entries = entries
        self._runners_before_stop = [
            self._runner(e) for e in entries if e.priority > PRIORITY_SNAPSHOT
        ]
        self._runners_after_stop = [
            self._runner(e) for e in entries if e.priority <= PRIORITY_SNAPSHOT
        ]
        self._started = True
        self._start_time = time.perf_counter()
        initialize_writer(self._writer, self._out)
        # Snapshots that autoload go first, so that every other extension (and its
        # trigger, e.g. a finished OnceTrigger) is initialized from the loaded state.
        loaders = [e for e in entries if e.loads_state]
        try:
            for entry in loaders + [e for e in entries if e not in loaders]:
                initialize = getattr(entry.extension, "initialize", None)
                if initialize is None or getattr(entry.trigger, "finished", False):
                    continue
                initialize(self)
        except BaseException:
            # Nothing ran yet, so no on_error (a snapshot_on_error must not save this state).
            self._failed = True
            self._finalize(raise_errors=False)
            raise
        self._start_time = time.perf_counter()
        if self.iteration == 0:
            before = [e for e in entries if e.call_before_training]
            if before:
                self._begin_iteration()
                try:
                    for entry in before:
                        entry.extension(self)
                except BaseException as exc:
                    self._fail_iteration(exc, exc.__traceback__)
                    raise
                self._close_scope()

    def run_extensions(self) -> None:
        """Run the extensions whose trigger fires at the current iteration, in order.

        The stop trigger is evaluated between the extensions of priority above
        :data:`~pytorch_pfn_extras.training.extension.PRIORITY_SNAPSHOT` and the others,
        so a snapshot records its state.
        """
        self._in_extensions = True
        for trigger, extension in self._runners_before_stop:
            if trigger(self):
                extension(self)
        if self._stop_iteration != self._run.iteration:
            self._evaluate_stop_trigger()
        for trigger, extension in self._runners_after_stop:
            if trigger(self):
                extension(self)
        self._in_extensions = False

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
        if self._finalized:
            why = self._stop_reason or "the stop trigger fired"
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
        """Call every extension's finalizer and finalize the writer (once).

        Called automatically when the stop trigger fires or an iteration fails.

        Raises:
            Exception: The first error a finalizer raised, after every finalizer ran.
        """
        self._finalize(raise_errors=True)

    def _finalize(self, raise_errors: bool) -> None:
        if self._finalized:
            return
        self._finalized = True
        errors: list[tuple[str, Exception]] = []
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

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """Return the whole training state, loadable with ``torch.load(weights_only=True)``.

        PPE 0.9's keys: ``_start_iteration`` and ``_start_execution`` (the iteration),
        ``models``, ``optimizers``, ``extensions`` (each extension's and trigger's state),
        ``state_objects`` and ``ppe_version`` (the version of pytorch-pfn-extras that wrote
        it, as ``ppe.__version__``; ppe-training's own without the meta-package);
        and this project's own: ``elapsed_time`` and ``stop_trigger`` (its state and its
        last result). It is :meth:`training_state_dict` and :meth:`rank_state_dict` with
        the models' and optimizers' ``state_dict()``.
        """
        state = self.training_state_dict()
        state["models"] = {name: m.state_dict() for name, m in self._models.items()}
        state["optimizers"] = {name: o.state_dict() for name, o in self._optimizers.items()}
        state.update(self.rank_state_dict())
        return state

    def training_state_dict(self) -> dict[str, Any]:
        """The state of the training loop itself, the same on every rank of a job.

        The iteration, the extensions' and triggers' state, the stop trigger, the elapsed
        time and ``ppe_version``: :meth:`state_dict` without the models, the optimizers and
        :meth:`rank_state_dict`. Sharded snapshots save it once (from the saver rank) and
        load it on every rank.
        """
        if self._started and self._stop_iteration != self.iteration:
            # A snapshot taken before the stop trigger ran this iteration records it
            # evaluated, so that the resumed run does not evaluate it twice.
            self._evaluate_stop_trigger()
        return {
            "_start_iteration": self.iteration,
            "_start_execution": self.iteration,
            "extensions": {name: e.state_dict() for name, e in self._extensions.items()},
            "ppe_version": ppe_version(),
            "elapsed_time": self.elapsed_time if self._start_time is not None else 0.0,
            "stop_trigger": {
                "state": self._stop_trigger.state_dict(),
                "evaluated_at": self._stop_iteration,
                "result": self._stop_result,
            },
        }

    def rank_state_dict(self) -> dict[str, Any]:
        """The state that may differ between the ranks of a job: ``state_objects``.

        Data loaders with ``state_dict()`` (their position in the epoch), random states...
        Sharded snapshots save it for every rank; each rank loads its own.
        """
        return {"state_objects": {name: o.state_dict() for name, o in self._state_objects.items()}}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`, or written by PPE 0.9.

        Extensions and state objects missing from the snapshot, or present in it but not
        registered, are reported with a warning naming them; models and optimizers must
        match. A snapshot written by another version (its ``ppe_version``), or by an
        unknown one (no ``ppe_version``), is loaded after a warning naming both versions.

        Raises:
            ValueError: ``to_load`` is not a manager state, or its models or optimizers
                differ from the manager's.
        """
        missing = [key for key in ("models", "optimizers") if key not in to_load]
        if _iteration_of(to_load) is None:
            missing.insert(0, "_start_iteration")
        if missing:
            message = (
                f"not a manager state_dict: it lacks {missing} (keys: {sorted(to_load)}); "
                "a file written by snapshot_object() loads into its own target"
            )
            raise ValueError(message)
        _warn_version(to_load)
        for kind, mine in (("models", self._models), ("optimizers", self._optimizers)):
            theirs = to_load[kind]
            if set(theirs) != set(mine):
                message = (
                    f"the snapshot has {kind} {sorted(theirs)} but the manager has "
                    f"{sorted(mine)}; they must match to resume"
                )
                raise ValueError(message)
        for name, model in self._models.items():
            model.load_state_dict(to_load["models"][name])
        for name, optimizer in self._optimizers.items():
            optimizer.load_state_dict(to_load["optimizers"][name])
        self._load_training_state(to_load)
        self.load_rank_state_dict(to_load)

    def load_training_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`training_state_dict` (models, optimizers and
        state objects are left as they are).

        Raises:
            ValueError: ``to_load`` has no iteration (``_start_iteration``).
        """
        if _iteration_of(to_load) is None:
            message = f"not a training state: it lacks '_start_iteration' (keys: {sorted(to_load)})"
            raise ValueError(message)
        _warn_version(to_load)
        self._load_training_state(to_load)

    def _load_training_state(self, to_load: Mapping[str, Any]) -> None:
        load_matching("extensions", self._extensions, to_load.get("extensions", {}))
        stop = to_load.get("stop_trigger")
        if stop is not None:
            self._stop_trigger.load_state_dict(stop["state"])
            if stop["state"]:
                # A stateful trigger (early stopping) must not see the same iteration twice.
                # A stateless one is simply re-evaluated, so that a run resumed with a longer
                # training length (more epochs) goes on instead of stopping where it was.
                self._stop_iteration = int(stop["evaluated_at"])
                self._stop_result = bool(stop["result"])
        self._run.iteration = int(_iteration_of(to_load) or 0)
        self._elapsed_before = float(to_load.get("elapsed_time", 0.0))
        if self._start_time is not None:
            self._start_time = time.perf_counter()

    def load_rank_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`rank_state_dict` (state objects missing from
        it, or unknown, are reported with a warning naming them)."""
        load_matching("state objects", self._state_objects, to_load.get("state_objects", {}))


def _iteration_of(to_load: Mapping[str, Any]) -> Any:
    """The iteration a manager state records: ``_start_iteration`` (``iteration`` in old
    snapshots), or ``None``."""
    return to_load.get("_start_iteration", to_load.get("iteration"))


@functools.cache
def ppe_version() -> str:
    """The version manager states record as ``ppe_version``: that of pytorch-pfn-extras (the
    meta-package, ``ppe.__version__``) where it is installed, as PPE 0.9 recorded its own,
    else that of ppe-training."""
    try:
        return importlib.metadata.version("pytorch-pfn-extras")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def _warn_version(to_load: Mapping[str, Any]) -> None:
    version = to_load.get("ppe_version")
    current = ppe_version()
    if version is None or str(version) != current:
        written = (
            "an unknown version (it has no 'ppe_version')"
            if version is None
            else f"version {version}"
        )
        message = (
            f"loading a snapshot written by {written} into version {current} of pytorch-pfn-extras"
        )
        warnings.warn(message, UserWarning, stacklevel=3)
