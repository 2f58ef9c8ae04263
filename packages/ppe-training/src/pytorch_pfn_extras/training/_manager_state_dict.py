"""The manager's state: saving and restoring it (``state_dict``, ``load_state_dict``...)."""

from __future__ import annotations

import functools
import importlib.metadata
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._manager_util import load_matching
from pytorch_pfn_extras.training._version import __version__

if TYPE_CHECKING:
    import torch

    from pytorch_pfn_extras.training._engine._run_state import RunState
    from pytorch_pfn_extras.training._extension import ExtensionEntry
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._trigger_util import Trigger

    # Mixed into the manager, it reads the manager's properties (iteration, elapsed_time):
    # to the type checker it is that manager. At run time it derives from object.
    _Manager = ExtensionsManagerProtocol
else:
    _Manager = object


class _ManagerStateDict(_Manager):
    """The state of :class:`_BaseExtensionsManager` (a mixin of it).

    The manager's ``__init__`` sets every attribute declared below; the method declared
    under ``TYPE_CHECKING`` is the manager's.
    """

    _models: dict[str, torch.nn.Module]
    _optimizers: dict[str, torch.optim.Optimizer]
    _state_objects: dict[str, Any]
    _extensions: dict[str, ExtensionEntry]
    _started: bool
    _start_time: float | None
    _elapsed_before: float
    _stop_trigger: Trigger
    _stop_iteration: int
    _stop_result: bool
    _run: RunState

    if TYPE_CHECKING:

        def _evaluate_stop_trigger(self) -> bool: ...

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
