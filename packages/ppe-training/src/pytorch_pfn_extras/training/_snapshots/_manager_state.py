"""What a sharded snapshot holds, in DCP's layout, and loading it into a manager.

The DCP state dict of a manager snapshot is::

    models/<name>/<fqn>            get_model_state_dict(model): DTensor shards under FSDP2,
                                   replicated tensors (written once) for DDP and plain models
    optimizers/<name>/state/<i>/…  get_optimizer_state_dict(), its parameters numbered in the
    optimizers/<name>/param_groups   optimizer's order, as torch.optim.Optimizer.state_dict()
    training                       torch.save(manager.training_state_dict()), by the saver rank
    ranks/<rank>                   torch.save(manager.rank_state_dict()), by every rank

(DCP joins the levels with dots.) The models and the optimizers are DCP ``Stateful`` objects:
DCP asks them for their state when it saves and gives the loaded state back to them. Numbering
the optimizer's parameters instead of naming them makes the sharded layout the ordinary one:
the converter turns it into one ``torch.save`` file (and back) without the model. Any other
target is saved as ``target/<its state_dict()>``.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from pytorch_pfn_extras.training._snapshots import _dcp
from pytorch_pfn_extras.training._snapshots._rank_states import merge_rank_states
from pytorch_pfn_extras.training._snapshots._storage import Storage

MODELS = "models"
OPTIMIZERS = "optimizers"
TRAINING = "training"
RANKS = "ranks"
TARGET = "target"
# The keys of ``rank_state_dict()`` (the manager's and the trainer's): in an ordinary snapshot
# file they sit at the top level next to the training state.
RANK_KEYS = ("state_objects", "trainer")
# The optimizers' state (moments, step counts; not their param_groups): only step() changes it.
OPTIMIZER_STATE = (OPTIMIZERS, "*", "state")


def blob(obj: Any) -> io.BytesIO:
    """``obj`` serialized by ``torch.save`` (DCP writes a ``BytesIO`` as it is)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def unblob(buffer: io.BytesIO, path: str, what: str) -> Any:
    """Load a :func:`blob` with ``torch.load(weights_only=True)``."""
    buffer.seek(0)
    try:
        return torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        message = (
            f"the {what} in the snapshot {path!r} holds objects that "
            "torch.load(weights_only=True) refuses (snapshots must contain only tensors, "
            "numbers, strings and lists/dicts of them; allow a class with "
            f"torch.serialization.add_safe_globals([...])): {error}"
        )
        raise pickle.UnpicklingError(message) from error


# ---------------------------------------------------------------- optimizers by position


def positional(state: Mapping[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names -> keyed by position, as ``Optimizer``."""
    index: dict[Any, int] = {}
    groups = []
    for group in state["param_groups"]:
        ids = [index.setdefault(name, len(index)) for name in group["params"]]
        groups.append({**group, "params": ids})
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": groups,
    }


def by_name(state: Mapping[str, Any], names: Sequence[Any], label: str) -> dict[str, Any]:
    """The inverse of :func:`positional`, with the parameter names of the live optimizer."""
    count = sum(len(group["params"]) for group in state["param_groups"])
    if count != len(names):
        message = (
            f"the snapshot's optimizer {label!r} has {count} parameters but the optimizer has "
            f"{len(names)}; the model and the optimizer must match to resume"
        )
        raise ValueError(message)
    return {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[int(i)] for i in group["params"]]}
            for group in state["param_groups"]
        ],
    }


class _Models(Stateful):
    """The models of a manager as one DCP ``Stateful`` (their states read once)."""

    def __init__(self, models: Mapping[str, torch.nn.Module]) -> None:
        self.models = dict(models)
        self.states = {name: get_model_state_dict(model) for name, model in models.items()}

    def state_dict(self) -> dict[str, Any]:
        return self.states

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, model in self.models.items():
            set_model_state_dict(model, state_dict[name])


class _Optimizers(Stateful):
    """The optimizers of a manager as one DCP ``Stateful``, their parameters by position."""

    def __init__(
        self, models: Mapping[str, torch.nn.Module], optimizers: Mapping[str, Any]
    ) -> None:
        # One module holding every model: an optimizer may span several. Its names never
        # reach the snapshot (parameters are numbered), so model names need no escaping.
        self.container = torch.nn.ModuleDict({f"m{i}": m for i, m in enumerate(models.values())})
        self.optimizers = dict(optimizers)
        self.names: dict[str, list[Any]] = {}

    def state_dict(self) -> dict[str, Any]:
        states = {}
        for name, optimizer in self.optimizers.items():
            named: Any = get_optimizer_state_dict(self.container, optimizer)
            self.names[name] = [p for group in named["param_groups"] for p in group["params"]]
            states[name] = positional(named)
        return states

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, optimizer in self.optimizers.items():
            named = by_name(state_dict[name], list(dict.fromkeys(self.names[name])), name)
            set_optimizer_state_dict(self.container, optimizer, named)


def manager_state(manager: Any, group: _dcp.Group, coordinator: bool) -> dict[str, Any]:
    """The DCP state dict of a manager snapshot on this rank (see the module docstring)."""
    training = manager.training_state_dict()  # on every rank: it settles the stop trigger
    state: dict[str, Any] = {
        **tensors_of(manager),
        RANKS: {str(group.rank): blob(manager.rank_state_dict())},
    }
    if coordinator:
        state[TRAINING] = blob(training)
    return state


def tensors_of(manager: Any) -> dict[str, Any]:
    """The part of :func:`manager_state` that holds tensors (the models and optimizers), in
    its order: what the asynchronous stager mirrors."""
    return {
        MODELS: _Models(manager.models).state_dict(),
        OPTIMIZERS: _Optimizers(manager.models, manager.optimizers).state_dict(),
    }


def target_state(target: Any) -> dict[str, Any]:
    """The DCP state dict of a snapshot of another object: its ``state_dict()``."""
    return {TARGET: target.state_dict()}


# ---------------------------------------------------------------- checking


def check_models(
    directory: str, metadata: Metadata, templates: Mapping[str, Mapping[str, Any]]
) -> None:
    """Check that the snapshot has a state for every model, of the same keys and shapes.

    Raises:
        ValueError: A model is missing from the snapshot or does not match it (the message
            names the keys missing on each side and the shapes that differ).
    """
    saved: dict[str, dict[str, Any]] = {}
    for path, key in _dcp.under(metadata, MODELS):
        if len(path) == 2:
            saved.setdefault(str(path[0]), {})[str(path[1])] = metadata.state_dict_metadata[key]
    missing_models = sorted(set(templates) - set(saved))
    if missing_models:
        message = (
            f"the snapshot {directory!r} has no state for the models {missing_models}; it has "
            f"{sorted(saved)} (the models must match to resume)"
        )
        raise ValueError(message)
    problems = []
    for name, template in templates.items():
        theirs = saved[name]
        missing = sorted(set(template) - set(theirs))
        unexpected = sorted(set(theirs) - set(template))
        shapes = []
        for key in sorted(set(template) & set(theirs)):
            meta = theirs[key]
            value = template[key]
            if (
                isinstance(meta, TensorStorageMetadata)
                and isinstance(value, torch.Tensor)
                and tuple(meta.size) != tuple(value.shape)
            ):
                shapes.append(
                    f"{key}: {tuple(meta.size)} in the snapshot, {tuple(value.shape)} in the model"
                )
        parts = []
        if missing:
            parts.append(f"missing from the snapshot: {missing}")
        if unexpected:
            parts.append(f"not in the model: {unexpected}")
        if shapes:
            parts.append("shapes differ: " + "; ".join(shapes))
        if parts:
            problems.append(f"model {name!r}: " + ", ".join(parts))
    if problems:
        message = f"the snapshot {directory!r} does not fit the models: " + "; ".join(problems)
        raise ValueError(message)


def _check_manager(
    directory: str, metadata: Metadata, models: _Models, optimizers: Mapping[str, Any], writers: int
) -> None:
    check_models(directory, metadata, models.states)
    theirs = {str(path[0]) for path, _ in _dcp.under(metadata, OPTIMIZERS) if path}
    if theirs != set(optimizers):
        message = (
            f"the snapshot {directory!r} has optimizers {sorted(theirs)} but the manager has "
            f"{sorted(optimizers)}; they must match to resume"
        )
        raise ValueError(message)
    ranks = sorted(int(path[0]) for path, _ in _dcp.under(metadata, RANKS) if len(path) == 1)
    if ranks != list(range(writers)) or TRAINING not in metadata.state_dict_metadata:
        message = (
            f"the snapshot {directory!r} lacks the training state of ranks "
            f"{sorted(set(range(writers)) - set(ranks))} (of {writers}) or of its saver "
            "rank: it was not written by snapshot(snapshot_mode=SnapshotMode.SHARDED) of a "
            "manager"
        )
        raise ValueError(message)


# ---------------------------------------------------------------- loading


def load_manager(
    manager: Any, storage: Storage, directory: str, group: _dcp.Group, writers: int
) -> None:
    """Load a manager snapshot written by ``writers`` ranks into ``manager`` (a collective)."""
    metadata = _dcp.read_metadata(storage, directory)
    models = _Models(manager.models)
    optimizers = _Optimizers(manager.models, manager.optimizers)
    _check_manager(directory, metadata, models, manager.optimizers, writers)
    same_world = writers == group.world_size
    wanted = [group.rank] if same_world else list(range(writers))
    state: dict[str, Any] = {
        MODELS: models,
        OPTIMIZERS: optimizers,
        TRAINING: io.BytesIO(),
        RANKS: {str(rank): io.BytesIO() for rank in wanted},
    }
    _dcp.load(state, storage, directory, group)
    manager.load_training_state_dict(unblob(state[TRAINING], directory, "training state"))
    rank_states = [unblob(state[RANKS][str(r)], directory, f"state of rank {r}") for r in wanted]
    if same_world:
        manager.load_rank_state_dict(rank_states[0])
    else:
        manager.load_rank_state_dict(
            merge_rank_states(rank_states, manager.rank_state_dict(), group.world_size)
        )


def load_target(target: Any, storage: Storage, directory: str, group: _dcp.Group) -> None:
    """Load a snapshot of another object into ``target`` (a collective)."""
    metadata = _dcp.read_metadata(storage, directory)
    if not _dcp.under(metadata, TARGET):
        message = (
            f"the snapshot {directory!r} holds a manager's state, not an object's: load it "
            "with snapshot(snapshot_mode=SnapshotMode.SHARDED) without a target"
        )
        raise ValueError(message)
    state = {TARGET: target.state_dict()}
    _dcp.load(state, storage, directory, group)
    target.load_state_dict(state[TARGET])
