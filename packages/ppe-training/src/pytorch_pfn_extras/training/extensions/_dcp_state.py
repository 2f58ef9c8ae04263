"""The layout of a sharded snapshot in torch.distributed.checkpoint (DCP), saving and loading.

Imported only when a sharded snapshot is written or read (``torch.distributed.checkpoint``
takes most of a second to import). The DCP state dict of a manager snapshot is::

    models/<name>/<fqn>            get_model_state_dict(model): DTensor shards under FSDP2,
                                   replicated tensors (written once) for DDP and plain models
    optimizers/<name>/state/<i>/…  get_optimizer_state_dict(), its parameters numbered in the
    optimizers/<name>/param_groups   optimizer's order, as torch.optim.Optimizer.state_dict()
    training                       torch.save(manager.training_state_dict()), by the saver rank
    ranks/<rank>                   torch.save(manager.rank_state_dict()), by every rank

(DCP joins the levels with dots.) Numbering the optimizer's parameters instead of naming them
makes the sharded layout the ordinary one: the converter turns it into one ``torch.save`` file
(and back) without the model. Any other target is saved as ``target/<its state_dict()>``.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from pytorch_pfn_extras.training.extensions._rank_states import merge_rank_states

MODELS = "models"
OPTIMIZERS = "optimizers"
TRAINING = "training"
RANKS = "ranks"
TARGET = "target"
# The keys of ``rank_state_dict()`` (the manager's and the trainer's): in an ordinary snapshot
# file they sit at the top level next to the training state.
RANK_KEYS = ("state_objects", "trainer")


class Group(NamedTuple):
    """Where the collectives of a snapshot run: ``group`` (``None`` with ``no_dist``)."""

    rank: int
    world_size: int
    group: Any
    no_dist: bool


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


def _parameter_names(state: Mapping[str, Any]) -> list[Any]:
    names: list[Any] = []
    for group in state["param_groups"]:
        names.extend(name for name in group["params"] if name not in names)
    return names


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


def _container(models: Mapping[str, torch.nn.Module]) -> torch.nn.Module:
    # One module holding every model: an optimizer may span several. Its names never reach
    # the snapshot (optimizer parameters are numbered), so model names need no escaping.
    return torch.nn.ModuleDict({f"m{i}": model for i, model in enumerate(models.values())})


# ---------------------------------------------------------------- saving


def manager_state(manager: Any, group: Group, coordinator: bool) -> dict[str, Any]:
    """The DCP state dict of a manager snapshot on this rank (see the module docstring)."""
    models: Mapping[str, torch.nn.Module] = manager.models
    container = _container(models)
    training = manager.training_state_dict()  # on every rank: it settles the stop trigger
    state: dict[str, Any] = {
        MODELS: {name: get_model_state_dict(model) for name, model in models.items()},
        OPTIMIZERS: {
            name: positional(get_optimizer_state_dict(container, optimizer))
            for name, optimizer in manager.optimizers.items()
        },
        RANKS: {str(group.rank): blob(manager.rank_state_dict())},
    }
    if coordinator:
        state[TRAINING] = blob(training)
    return state


def target_state(target: Any) -> dict[str, Any]:
    """The DCP state dict of a snapshot of another object: its ``state_dict()``."""
    return {TARGET: target.state_dict()}


# The optimizers' state (moments, step counts; not their param_groups): only step() changes it.
OPTIMIZER_STATE = (OPTIMIZERS, "*", "state")

_ATOMIC = (str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device)


class MirrorStager(AsyncStager):
    """An ``AsyncStager`` of DCP that keeps a CPU mirror of the state between saves.

    The first save allocates the mirror (DCP's ``DefaultStager`` copies the state, in pinned
    memory when CUDA is there); the next ones copy the tensors into it with one
    ``torch._foreach_copy_`` and rebuild only the containers around them. (DCP's stager
    reuses its memory too but deep-copies the whole state dict, DTensor specs and device
    meshes included, on every save: a third of the wait.) A state whose tensors changed in
    type, shape, dtype or sharding is copied afresh by the ``DefaultStager`` and becomes the
    new mirror.

    Args:
        deferred: A path in the state dict (``"*"`` matches any key) whose CPU tensors are
            copied in a background thread after :meth:`stage` returns, instead of before.
            The caller must call :meth:`wait_copy` before anything may change them (the
            snapshot extension defers :data:`OPTIMIZER_STATE` and waits in a step pre-hook
            of every optimizer). Their version counters are compared after the copy: a
            change that torch records makes the write fail (see :class:`StagedWriter`)
            rather than save a torn state.

    The mirror is reused, so a save may start only once the previous one finished writing
    (the snapshot extension never has two in flight). Call :meth:`close` after the last save.
    """

    # DCP's protocol: the staged dict is returned, DCP has nothing to wait for (the deferred
    # copy is awaited by the StagedWriter before it reads any data).
    _synchronize_after_execute = False

    def __init__(self, deferred: tuple[str, ...] | None = None) -> None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        options = StagingOptions(
            use_pinned_memory=torch.cuda.is_available(),
            use_shared_memory=False,
            use_async_staging=False,
            use_non_blocking_copy=False,
        )
        self._default = DefaultStager(options)
        self._deferred = deferred
        self._layout: list[tuple[Any, ...]] | None = None
        self._mirror: list[torch.Tensor] = []  # the staged tensors, in traversal order
        self._targets: list[torch.Tensor] = []  # their local data, copied into
        self._copier: ThreadPoolExecutor | None = None
        self._copy: Future[None] | None = None  # the deferred copy of the last stage()

    @torch.no_grad()
    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A CPU copy of ``state_dict`` that later changes of its tensors do not reach.

        Tensors under the ``deferred`` path are still being copied when this returns.
        """
        sources: list[torch.Tensor] = []
        layout: list[tuple[Any, ...]] = []
        marks: list[bool] = []
        _collect_marked(state_dict, self._deferred, sources, layout, marks)
        if layout != self._layout:
            staged = self._default.stage(state_dict)  # synchronous staging: not a Future
            assert isinstance(staged, dict)
            mirror: list[torch.Tensor] = []
            _collect(staged, mirror, [])
            self._mirror = mirror
            self._targets = [_local(tensor) for tensor in mirror]
            self._layout = layout
            self._copy = None
            return staged
        locals_ = [_local(source) for source in sources]
        later = [i for i, local in enumerate(locals_) if marks[i] and local.device.type == "cpu"]
        deferred = set(later)
        now = [i for i in range(len(sources)) if i not in deferred]
        _copy_all([self._targets[i] for i in now], [locals_[i] for i in now])
        rebuilt: dict[str, Any] = _rebuild(state_dict, iter(self._mirror))
        self._copy = None
        if later:
            if self._copier is None:
                self._copier = ThreadPoolExecutor(1, thread_name_prefix="ppe-snapshot-copy")
            self._copy = self._copier.submit(
                _copy_checked, _Deferred(self._targets, sources, locals_, later), rebuilt
            )
        return rebuilt

    def wait_copy(self) -> None:
        """Wait until the deferred copy of the last :meth:`stage` finished (errors aside)."""
        copy = self._copy
        if copy is not None:
            wait([copy])

    def check_copy(self) -> None:
        """Wait for the deferred copy and raise its error (a torn or failed copy)."""
        copy = self._copy
        if copy is not None:
            copy.result()

    def synchronize_staging(self) -> None:
        """Nothing for DCP to wait for (see :meth:`wait_copy`)."""

    def close(self) -> None:
        """Release the mirror and the copying thread (once its copy finished)."""
        if self._copier is not None:
            self._copier.shutdown(wait=True)
            self._copier = None
        self._default.close()
        self._layout = None
        self._mirror = []
        self._targets = []
        self._copy = None


class StagedWriter(FileSystemWriter):
    """A ``FileSystemWriter`` that waits for its :class:`MirrorStager`'s deferred copy.

    DCP plans a save from the tensors' metadata and reads their data only in
    ``write_data``: waiting there lets the plan's collectives run during the copy, and a
    failed copy fails this rank's write, which DCP reports on every rank (no rank waits
    for it, none commits the snapshot).
    """

    def __init__(self, path: str, stager: MirrorStager) -> None:
        super().__init__(path)
        self._stager = stager

    def write_data(self, plan: Any, planner: Any) -> Any:
        self._stager.check_copy()
        return super().write_data(plan, planner)


def _copy_all(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    if not targets:
        return
    devices = {source.device for source in sources if source.device.type != "cpu"}
    torch._foreach_copy_(targets, sources, non_blocking=bool(devices))
    for device in devices:  # device-to-host copies into pinned memory: wait for them
        synchronize = getattr(getattr(torch, device.type, None), "synchronize", None)
        if callable(synchronize):
            synchronize(device)


class _Deferred:
    """The tensors :meth:`MirrorStager.stage` left to its thread: their positions in the
    state, and their version counters (the wrapper's and the local shard's) at the save."""

    def __init__(
        self,
        targets: list[torch.Tensor],
        sources: list[torch.Tensor],
        locals_: list[torch.Tensor],
        positions: list[int],
    ) -> None:
        self.positions = positions
        self.targets = [targets[i] for i in positions]
        self.sources = [sources[i] for i in positions]
        self.locals = [locals_[i] for i in positions]
        self.versions = self._versions()

    def _versions(self) -> list[tuple[int, int]]:
        pairs = zip(self.sources, self.locals, strict=True)
        return [(source._version, local._version) for source, local in pairs]

    def changed(self) -> list[int]:
        """The positions of the tensors changed in place since the save."""
        now = self._versions()
        return [p for p, a, b in zip(self.positions, self.versions, now, strict=True) if a != b]


@torch.no_grad()
def _copy_checked(deferred: _Deferred, staged: dict[str, Any]) -> None:
    # The deferred copy, in the stager's thread: torch ops release the GIL while copying.
    _copy_all(deferred.targets, deferred.locals)
    changed = deferred.changed()
    if changed:
        names = _named(staged)
        listed = [names[i] for i in changed]
        shown = ", ".join(listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
        message = (
            f"the optimizer state {shown} changed while the asynchronous snapshot copied it "
            "(after snapshot() returned, before the optimizer's next step(), which waits for "
            "the copy); the snapshot is not committed. Change an optimizer's state only by "
            "its step(), or save with async_save=False"
        )
        raise RuntimeError(message)


def _collect_marked(
    value: Any,
    pattern: tuple[str, ...] | None,
    tensors: list[torch.Tensor],
    layout: list[tuple[Any, ...]],
    marks: list[bool],
) -> None:
    # _collect, in the same order, marking the tensors under ``pattern`` (``()`` once it
    # matched, ``None`` where it cannot).
    if not pattern or not isinstance(value, dict):
        count = len(tensors)
        _collect(value, tensors, layout)
        marks.extend([pattern == ()] * (len(tensors) - count))
        return
    for key, item in value.items():
        rest = pattern[1:] if pattern[0] in ("*", key) else None
        _collect_marked(item, rest, tensors, layout, marks)


def _named(value: Any, prefix: str = "") -> list[str]:
    # The dotted path of each tensor of a state dict, in _collect's order.
    if isinstance(value, torch.Tensor):
        return [prefix]
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    names = []
    for key, item in items:
        names.extend(_named(item, f"{prefix}.{key}" if prefix else str(key)))
    return names


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # a DTensor's shard on this rank
    return to_local() if callable(to_local) else tensor


def _collect(value: Any, tensors: list[torch.Tensor], layout: list[tuple[Any, ...]]) -> None:
    # The tensors of a state dict in a fixed order, each with what its copy must match.
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        local = _local(value)
        spec = (getattr(value, "device_mesh", None), tuple(getattr(value, "placements", ())))
        layout.append((type(value), value.shape, local.shape, local.dtype, spec))
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, tensors, layout)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, tensors, layout)


def _rebuild(value: Any, mirror: Iterator[torch.Tensor]) -> Any:
    # ``value`` with its tensors replaced by the mirror's, in _collect's order, and its other
    # leaves copied.
    if isinstance(value, torch.Tensor):
        return next(mirror)
    if type(value) is dict:
        return {key: _rebuild(item, mirror) for key, item in value.items()}
    if type(value) is list:
        return [_rebuild(item, mirror) for item in value]
    if isinstance(value, dict | list):
        # A subclass (OrderedDict, defaultdict) is copied as itself, its items replaced.
        rebuilt = copy.copy(value)
        for key in value.keys() if isinstance(value, dict) else range(len(value)):
            rebuilt[key] = _rebuild(value[key], mirror)
        return rebuilt
    if isinstance(value, tuple):
        items = [_rebuild(item, mirror) for item in value]
        if type(value) is tuple:
            return tuple(items)
        # A namedtuple takes its fields, torch.Size and other subclasses an iterable.
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, _ATOMIC):
        return value
    if isinstance(value, io.BytesIO):
        return io.BytesIO(value.getbuffer())
    return copy.deepcopy(value)


def save(
    state: dict[str, Any], directory: str, group: Group, *, stager: MirrorStager | None = None
) -> Future[Any] | None:
    """Write ``state`` into ``directory`` with every rank of ``group`` (a collective).

    Args:
        stager: For an asynchronous save, the :class:`MirrorStager` that copies the state in
            memory before this returns; the write goes on in a background thread.

    Returns:
        The future of an asynchronous write; ``None`` after a synchronous one.
    """
    writer = FileSystemWriter(directory) if stager is None else StagedWriter(directory, stager)
    if group.no_dist:
        _quiet_single_process()
    if stager is None:
        try:
            dcp_save(state, storage_writer=writer, process_group=group.group, no_dist=group.no_dist)
        except CheckpointException as error:  # a BaseException: make it an ordinary error
            message = f"writing the sharded snapshot {directory!r} failed: {_failures(error)}"
            raise RuntimeError(message) from error
        return None
    response = dcp_async_save(
        state,
        storage_writer=writer,
        process_group=group.group,
        no_dist=group.no_dist,
        async_stager=stager,
    )
    future = getattr(response, "upload_completion", response)
    assert isinstance(future, Future)
    return future


# ---------------------------------------------------------------- checking


def read_metadata(directory: str) -> Metadata:
    """The DCP metadata of a snapshot directory.

    Raises:
        FileNotFoundError: The directory has no ``.metadata`` (not a sharded snapshot).
    """
    try:
        return FileSystemReader(directory).read_metadata()
    except FileNotFoundError as error:
        message = (
            f"the sharded snapshot {directory!r} has no .metadata (written by "
            "torch.distributed.checkpoint when every rank finished): it is damaged or not a "
            "sharded snapshot"
        )
        raise FileNotFoundError(message) from error


def check_files(directory: str, metadata: Metadata) -> None:
    """Check that every shard file the metadata refers to is there and long enough.

    Raises:
        FileNotFoundError: A shard is missing or truncated (the message names it, the rank
            that wrote it and what it holds).
    """
    needed: dict[str, tuple[int, list[str]]] = {}
    for index, info in (metadata.storage_data or {}).items():
        end, keys = needed.get(info.relative_path, (0, []))
        keys.append(index.fqn)
        needed[info.relative_path] = (max(end, info.offset + info.length), keys)
    problems = []
    for name, (end, keys) in sorted(needed.items()):
        path = os.path.join(directory, name)
        size = os.path.getsize(path) if os.path.exists(path) else None
        if size is not None and size >= end:
            continue
        state = "missing" if size is None else f"truncated ({size} of {end} bytes)"
        holds = sorted(set(keys))
        listed = ", ".join(holds[:4]) + (f" and {len(holds) - 4} more" if len(holds) > 4 else "")
        problems.append(f"{name} ({_writer_of(name)}) is {state}; it holds {listed}")
    if problems:
        message = (
            f"the sharded snapshot {directory!r} is incomplete: " + "; ".join(problems) + ". "
            "Copy the whole directory, or delete it to resume from the previous snapshot"
        )
        raise FileNotFoundError(message)


def _writer_of(name: str) -> str:
    # FileSystemWriter names its files ``__<rank>_<n>.distcp``.
    parts = name.split("_")
    if name.startswith("__") and len(parts) >= 3 and parts[2].isdigit():
        return f"written by rank {parts[2]}"
    return "a shard file"


class _Tree(NamedTuple):
    """The metadata of a snapshot, by the path of each item (DCP's ``planner_data``)."""

    paths: dict[str, tuple[Any, ...]]

    def under(self, *prefix: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
        n = len(prefix)
        for key, path in self.paths.items():
            if tuple(str(p) for p in path[:n]) == tuple(str(p) for p in prefix):
                yield path[n:], key


def tree_paths(metadata: Metadata) -> dict[str, tuple[Any, ...]]:
    """The path in the saved (nested) state dict of each item of the metadata."""
    return _tree(metadata).paths


def _tree(metadata: Metadata) -> _Tree:
    data = metadata.planner_data
    if not isinstance(data, dict):
        data = {key: tuple(key.split(".")) for key in metadata.state_dict_metadata}
    return _Tree({key: tuple(path) for key, path in data.items()})


def check_models(
    directory: str, metadata: Metadata, templates: Mapping[str, Mapping[str, Any]]
) -> None:
    """Check that the snapshot has a state for every model, of the same keys and shapes.

    Raises:
        ValueError: A model is missing from the snapshot or does not match it (the message
            names the keys missing on each side and the shapes that differ).
    """
    tree = _tree(metadata)
    saved: dict[str, dict[str, Any]] = {}
    for path, key in tree.under(MODELS):
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


def saved_optimizers(metadata: Metadata) -> set[str]:
    """The names of the optimizers a manager snapshot holds."""
    return {str(path[0]) for path, _ in _tree(metadata).under(OPTIMIZERS) if path}


def saved_ranks(metadata: Metadata) -> list[int]:
    """The ranks whose ``rank_state_dict()`` a manager snapshot holds."""
    return sorted(int(path[0]) for path, _ in _tree(metadata).under(RANKS) if len(path) == 1)


# ---------------------------------------------------------------- loading


def _quiet_single_process() -> None:
    # DCP warns on every call without a process group that it assumes one process, which is
    # what ``no_dist`` asks for. The filter is global (an asynchronous save warns from its
    # thread, after any catch_warnings() would have ended); it matches that message only.
    warnings.filterwarnings(
        "ignore",
        message="torch.distributed is disabled, unavailable or uninitialized",
        category=UserWarning,
    )


def load_state(state: dict[str, Any], directory: str, group: Group) -> None:
    """``dcp.load`` of ``state`` (filled in place), its failures named by rank."""
    reader = FileSystemReader(directory)
    if group.no_dist:
        _quiet_single_process()
    try:
        dcp_load(state, storage_reader=reader, process_group=group.group, no_dist=group.no_dist)
    except CheckpointException as error:  # a BaseException: make it an ordinary error
        message = f"loading the sharded snapshot {directory!r} failed: {_failures(error)}"
        raise RuntimeError(message) from error


def describe_failure(error: BaseException) -> str:
    """A one-line description of an error of DCP (its failures by rank) or another one."""
    if isinstance(error, CheckpointException):
        return _failures(error)
    return f"{type(error).__name__}: {error}"


def _failures(error: CheckpointException) -> str:
    parts = []
    for rank, failure in error.failures.items():
        # Each failure is (exception, stack) as DCP wraps it, or the exception.
        cause = failure[0] if isinstance(failure, tuple) else failure
        parts.append(f"rank {rank}: {type(cause).__name__}: {cause}")
    return "; ".join(parts)


def load_manager(manager: Any, directory: str, group: Group, writers: int) -> None:
    """Load a manager snapshot written by ``writers`` ranks into ``manager`` (a collective)."""
    metadata = read_metadata(directory)
    models: Mapping[str, torch.nn.Module] = manager.models
    optimizers: Mapping[str, torch.optim.Optimizer] = manager.optimizers
    model_states = {name: get_model_state_dict(model) for name, model in models.items()}
    check_models(directory, metadata, model_states)
    theirs = saved_optimizers(metadata)
    if theirs != set(optimizers):
        message = (
            f"the snapshot {directory!r} has optimizers {sorted(theirs)} but the manager has "
            f"{sorted(optimizers)}; they must match to resume"
        )
        raise ValueError(message)
    ranks = saved_ranks(metadata)
    if ranks != list(range(writers)) or TRAINING not in metadata.state_dict_metadata:
        message = (
            f"the snapshot {directory!r} lacks the training state of ranks "
            f"{sorted(set(range(writers)) - set(ranks))} (of {writers}) or of its saver "
            "rank: it was not written by snapshot(snapshot_mode=SnapshotMode.SHARDED) of a "
            "manager"
        )
        raise ValueError(message)
    container = _container(models)
    names = {}
    optimizer_states = {}
    for name, optimizer in optimizers.items():
        named = get_optimizer_state_dict(container, optimizer)
        names[name] = _parameter_names(named)
        optimizer_states[name] = positional(named)
    same_world = writers == group.world_size
    wanted = [group.rank] if same_world else list(range(writers))
    state: dict[str, Any] = {
        MODELS: model_states,
        OPTIMIZERS: optimizer_states,
        TRAINING: io.BytesIO(),
        RANKS: {str(rank): io.BytesIO() for rank in wanted},
    }
    load_state(state, directory, group)
    for name, model in models.items():
        set_model_state_dict(model, state[MODELS][name])
    for name, optimizer in optimizers.items():
        named = by_name(state[OPTIMIZERS][name], names[name], name)
        set_optimizer_state_dict(container, optimizer, named)
    manager.load_training_state_dict(unblob(state[TRAINING], directory, "training state"))
    rank_states = [unblob(state[RANKS][str(r)], directory, f"state of rank {r}") for r in wanted]
    if same_world:
        manager.load_rank_state_dict(rank_states[0])
    else:
        manager.load_rank_state_dict(
            merge_rank_states(rank_states, manager.rank_state_dict(), group.world_size)
        )


def load_target(target: Any, directory: str, group: Group) -> None:
    """Load a snapshot of another object into ``target`` (a collective)."""
    metadata = read_metadata(directory)
    if not any(True for _ in _tree(metadata).under(TARGET)):
        message = (
            f"the snapshot {directory!r} holds a manager's state, not an object's: load it "
            "with snapshot(snapshot_mode=SnapshotMode.SHARDED) without a target"
        )
        raise ValueError(message)
    state = {TARGET: target.state_dict()}
    load_state(state, directory, group)
    target.load_state_dict(state[TARGET])
