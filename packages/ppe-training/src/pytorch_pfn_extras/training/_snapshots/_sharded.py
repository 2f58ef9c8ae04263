"""``SnapshotMode.SHARDED``: every rank writes one snapshot directory through DCP.

Every rank writes its part into a temporary directory next to the final one (named by the
coordinator, ppe-core's convention); the coordinator (the saver rank, 0 by default) commits it
once every rank finished (see :mod:`._layout`). All of it goes through the writer's file
system (:mod:`._storage`). Autoload also reads PPE 0.9's SHARDED directories (one
``torch.save`` file per rank and a ``complete`` marker) on the same number of ranks.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import types
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._snapshots._base import SnapshotExtension, SnapshotOptions
from pytorch_pfn_extras.training._snapshots._comm import Comm
from pytorch_pfn_extras.training._snapshots._layout import (
    Found,
    Manifest,
    SnapshotDirs,
    commit,
    describe,
    directory_to_write,
    inspect,
)
from pytorch_pfn_extras.training._snapshots._load import load_file, read_error
from pytorch_pfn_extras.training._snapshots._own import ForeignEntries, is_snapshot_file
from pytorch_pfn_extras.training._snapshots._storage import Storage, snapshot_out_dir
from pytorch_pfn_extras.training._version import __version__
from pytorch_pfn_extras.training._writer_util import check_writer
from pytorch_pfn_extras.writing import hold_lease

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._snapshots._dcp import Group

_WHAT = "snapshot(snapshot_mode=SnapshotMode.SHARDED)"


@dataclass
class _Pending:
    """An asynchronous save in flight: committed by the coordinator when it completes."""

    name: str
    future: Future[Any]
    lease: contextlib.ExitStack  # the coordinator's lease on the temporary, until the commit
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(frozen=True)
class _Choice:
    """The snapshot the coordinator chose to autoload, or the error every rank raises."""

    path: str | None = None
    found: Found | None = None
    error: BaseException | None = None


class _ShardedSnapshot(SnapshotExtension):
    """The extension returned by ``snapshot(snapshot_mode=SnapshotMode.SHARDED)``."""

    def __init__(self, options: SnapshotOptions, *, async_save: bool) -> None:
        self._dirs: SnapshotDirs | None = None
        if isinstance(options.filename, str):
            self._dirs = SnapshotDirs(options.filename)
        super().__init__(options)
        self._async = async_save
        self._storage = Storage()
        self._pending: _Pending | None = None
        self._stager: Any = None  # the CPU copy of the state of asynchronous saves
        self._fences: list[Any] = []  # the optimizers' hooks that wait for the copy
        self._foreign = ForeignEntries(_WHAT)

    @property
    def default_name(self) -> str:
        """``'_Snapshot'``, as the other snapshots."""
        return "_Snapshot"

    def _content(self) -> str:
        return "manager" if self._target is None else "target"

    def _group(self, comm: Comm) -> Group:
        from pytorch_pfn_extras.training._snapshots._dcp import Group

        return Group(comm.rank, comm.world_size, comm.group, no_dist=not comm.distributed)

    # ------------------------------------------------------------------ starting

    def initialize(self, manager: ExtensionsManagerProtocol) -> str | None:
        """Set up the snapshot's process group and file system, remove stale temporaries,
        and autoload the newest complete snapshot.

        Returns:
            The name of the snapshot loaded (relative to the output directory), or
            ``None`` when none was.
        """
        comm = self._set_up(manager)
        if comm.is_coordinator and self._dirs is not None:
            # Before autoload: a rewrite of the same name killed half way left the committed
            # snapshot in a temporary, which autoload would not see and the cleanup delete.
            stale = self._dirs.stale_temporaries(self._storage, self._out)
            for path in self._dirs.recover(self._storage, self._out, stale):
                warnings.warn(
                    f"{_WHAT}: recovered the snapshot {path!r}, which a process killed while "
                    "replacing it had left in a temporary directory",
                    UserWarning,
                    stacklevel=2,
                )
        if self.autoload:
            self._autoload(manager, comm)
        if comm.is_coordinator and self._dirs is not None:
            self._dirs.remove_temporaries(self._storage, self._out)
        if self.resumed_from is None:
            return None
        return os.path.relpath(self.resumed_from, self._out)

    def _set_up(self, manager: ExtensionsManagerProtocol) -> Comm:
        """What :meth:`initialize` does before it looks at the snapshots: the ranks, the
        file system, the stager of asynchronous saves."""
        if self._target is None and not callable(getattr(manager, "training_state_dict", None)):
            message = (
                f"{_WHAT} saves the manager through training_state_dict() and "
                f"rank_state_dict(), which {type(manager).__name__} lacks; use an "
                "ExtensionsManager (or pass target=)"
            )
            raise TypeError(message)
        writer = self._writer if self._writer is not None else manager.writer
        self._out = snapshot_out_dir(self._writer, manager)  # as in PPE 0.9; bucket checked
        if writer is not None:
            check_writer(writer, "snapshot")
        self._storage = Storage.of(writer)
        if self._comm is None:
            self._comm = Comm(self._saver_rank, _WHAT)
        if self._async and self._stager is None:
            self._stager = self._new_stager(manager)
        return self._comm

    def _autoload(self, manager: ExtensionsManagerProtocol, comm: Comm) -> None:
        # The coordinator chooses (every rank must load the same snapshot) and checks it;
        # its verdict, a path or an error, goes to every rank, so that all fail alike.
        choice = self._choose(comm) if comm.is_coordinator else _Choice()
        choice = comm.broadcast(choice)
        if choice.error is not None:
            raise choice.error
        if choice.path is None or choice.found is None:
            return
        path, found = choice.path, choice.found
        target = manager if self._target is None else self._target
        if found.kind == "ppe09":
            target.load_state_dict(load_file(self._storage, os.path.join(path, str(comm.rank))))
        else:
            from pytorch_pfn_extras.training._snapshots import _manager_state

            group = self._group(comm)
            if self._target is None:
                _manager_state.load_manager(manager, self._storage, path, group, found.world_size)
            else:
                _manager_state.load_target(self._target, self._storage, path, group)
        self.resumed_from = path

    def _choose(self, comm: Comm) -> _Choice:
        # Only a committed snapshot (a readable manifest) is loaded; what never committed (a
        # partial directory, a foreign one, a damaged manifest) is skipped with a warning, and
        # left as it is. A committed snapshot that cannot be loaded, or an OSError, is an
        # error: a run never passes over a committed snapshot silently.
        assert self._dirs is not None
        try:
            for path in self._dirs.candidates(self._storage, self._out):
                try:
                    found = inspect(self._storage, path)
                    uncommitted = found.kind in ("partial", "unknown", "damaged", "missing") or (
                        found.kind == "file" and not is_snapshot_file(self._storage, path)
                    )
                except OSError as error:
                    raise read_error(path, error) from error
                if uncommitted:
                    message = f"{describe(path, found)}; loading the previous snapshot"
                    warnings.warn(message, UserWarning, stacklevel=2)
                    continue
                self._check(path, found, comm)
                return _Choice(path, found)
        except Exception as error:  # every rank raises it (none waits for a broadcast)
            return _Choice(error=error)
        return _Choice()

    def _check(self, path: str, found: Found, comm: Comm) -> None:
        if found.kind == "ppe09":
            if found.world_size != comm.world_size:
                message = (
                    f"{describe(path, found)}, written by {found.world_size} ranks; it "
                    f"resumes only on {found.world_size} ranks, not {comm.world_size} (each "
                    "rank loads its own file); resume on that many ranks, and the next "
                    "snapshots (torch.distributed.checkpoint) resume on any number"
                )
                raise ValueError(message)
            return
        manifest = found.manifest
        if manifest is None:
            message = (
                f"{describe(path, found)}; {_WHAT} loads snapshot directories: move it away "
                "to resume from the previous snapshot, or use the mode that wrote it"
            )
            raise FileNotFoundError(message)
        if manifest.mode != "SHARDED" or manifest.content != self._content():
            message = (
                f"the snapshot {path!r} holds a {manifest.content}'s state in "
                f"SnapshotMode.{manifest.mode}, but this {_WHAT} loads a "
                f"{self._content()}'s state; use the mode and target that wrote it, or "
                "another filename"
            )
            raise ValueError(message)
        from pytorch_pfn_extras.training._snapshots import _dcp

        _dcp.check_files(self._storage, path, _dcp.read_metadata(self._storage, path))

    # ------------------------------------------------------------------ saving

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Write a snapshot with every rank (if ``condition`` allows it)."""
        if self._condition is not None and not self._condition():
            return
        self.save(manager)

    def save(self, manager: ExtensionsManagerProtocol) -> None:
        """Write a snapshot with every rank now, whatever ``condition`` says."""
        if self._comm is None:
            self._set_up(manager)  # not initialized: its trigger had finished at the start
        self._save(manager)
        self.saved_at = manager.iteration

    def _save(self, manager: ExtensionsManagerProtocol) -> None:
        self.wait()  # never two saves in flight; a failed one raises here
        comm = self._comm
        if comm is None:
            message = f"{_WHAT} ran before the extensions were initialized"
            raise RuntimeError(message)
        filename = self._filename
        name = filename.format(manager) if isinstance(filename, str) else filename(manager)
        final = os.path.join(self._out, name)
        comm.barrier(f"the snapshot {name!r}")
        # Every rank writes where the coordinator says: a temporary named after its host and
        # process, under a lease the coordinator refreshes until the commit (the next run, on
        # any host, removes it once abandoned), or the final directory on object storage; or
        # every rank raises its refusal to replace something.
        lease = contextlib.ExitStack()
        try:
            choice: tuple[str, BaseException | None] = ("", None)
            if comm.is_coordinator:
                try:
                    written = directory_to_write(self._storage, final)
                    if written != final:
                        lease.enter_context(hold_lease(self._storage.fs, written))
                    choice = (written, None)
                except Exception as error:
                    choice = ("", error)
            temporary, refused = comm.broadcast(choice)
            if refused is not None:
                raise refused
            self._storage.makedirs(temporary)
            manifest = Manifest(
                mode="SHARDED",
                world_size=comm.world_size,
                content=self._content(),
                iteration=manager.iteration,
                ppe_version=__version__,
            )
            try:
                future = self._write(manager, comm, temporary)
            except BaseException:
                # DCP failed on every rank together (its failures are gathered): none writes.
                if comm.is_coordinator:
                    self._storage.remove_tree(temporary)
                raise
            if future is not None:
                self._pending = pending = _Pending(name, future, lease.pop_all())
                future.add_done_callback(
                    lambda f: self._complete(pending, f, manifest, temporary, final)
                )
                return
            if comm.is_coordinator:
                self._commit(manifest, temporary, final)
        finally:
            lease.close()

    def _write(
        self, manager: ExtensionsManagerProtocol, comm: Comm, temporary: str
    ) -> Future[Any] | None:
        from pytorch_pfn_extras.training._snapshots import _dcp, _manager_state

        group = self._group(comm)
        if self._target is None:
            state = _manager_state.manager_state(manager, group, comm.is_coordinator)
        else:
            state = _manager_state.target_state(self._target)
        return _dcp.save(state, self._storage, temporary, group, stager=self._stager)

    def _new_stager(self, manager: ExtensionsManagerProtocol) -> Any:
        from pytorch_pfn_extras.training._snapshots._manager_state import OPTIMIZER_STATE
        from pytorch_pfn_extras.training._snapshots._staging import MirrorStager

        # The optimizers' state is copied after the call returns when every optimizer can
        # wait for that copy before its next step() (torch.optim.Optimizer's step pre-hooks).
        optimizers = list(manager.optimizers.values()) if self._target is None else []
        if not optimizers or not all(
            callable(getattr(o, "register_step_pre_hook", None)) for o in optimizers
        ):
            return MirrorStager()
        stager = MirrorStager(OPTIMIZER_STATE)

        def fence(*_: Any) -> None:
            stager.wait_copy()

        self._fences = [o.register_step_pre_hook(fence) for o in optimizers]

        def prepare(*_: Any) -> None:
            # Once, after the first optimizer step (the optimizers' state exists then): the
            # mirror is allocated in the background, not while the first save blocks.
            for hook in prepared:
                hook.remove()
            from pytorch_pfn_extras.training._snapshots import _manager_state

            stager.prepare(_manager_state.tensors_of(manager))

        prepared = [optimizers[0].register_step_post_hook(prepare)]
        self._fences += prepared
        return stager

    def _commit(self, manifest: Manifest, temporary: str, final: str) -> None:
        try:
            manifest.write(self._storage, temporary)
            commit(self._storage, temporary, final)
        except BaseException:
            self._storage.remove_tree(temporary)
            raise
        if self._n_retains > 0 and self._dirs is not None:
            self._dirs.retain(self._storage, self._out, self._n_retains, final, self._foreign)

    def _complete(
        self, pending: _Pending, future: Future[Any], manifest: Manifest, temporary: str, final: str
    ) -> None:
        # Runs in DCP's background thread once this rank's part of the save completed.
        try:
            if self._comm is not None and self._comm.is_coordinator:
                if future.exception() is None:
                    self._commit(manifest, temporary, final)
                else:  # failed on every rank together: none writes any more
                    self._storage.remove_tree(temporary)
        except BaseException as error:
            pending.error = error
        finally:
            try:
                pending.lease.close()
            finally:
                pending.done.set()

    def wait(self) -> None:
        """Wait for the asynchronous save in flight, if any.

        Raises:
            RuntimeError: The save (or its commit) failed.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.future.result()
        except BaseException as error:  # DCP's CheckpointException is a BaseException
            from pytorch_pfn_extras.training._snapshots._dcp import describe_failure

            message = (
                f"the asynchronous snapshot {pending.name!r} failed: {describe_failure(error)}"
            )
            raise RuntimeError(message) from error
        pending.done.wait()
        if pending.error is not None:
            message = (
                f"committing the asynchronous snapshot {pending.name!r} failed: {pending.error}"
            )
            raise RuntimeError(message) from pending.error

    def wait_for_writes(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait for the asynchronous save in flight and its commit (:meth:`wait`)."""
        self.wait()

    # ------------------------------------------------------------------ ending

    def on_error(
        self,
        manager: ExtensionsManagerProtocol,
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        """Nothing is written on error: a sharded snapshot needs every rank."""

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait for the asynchronous save in flight (its error is raised here)."""
        try:
            self.wait()
        finally:
            fences, self._fences = self._fences, []
            for fence in fences:
                fence.remove()
            stager, self._stager = self._stager, None
            if stager is not None:
                stager.close()
                # Asynchronous saves leave reference cycles that hold DCP's executor with its
                # thread pool and the stager's CPU copy (pinned memory with CUDA). Left to the
                # cyclic collector they are destroyed whenever it runs, at the interpreter's
                # exit at the latest, after torch.distributed is gone: with FSDP2 about 1 run
                # in 20 then aborted ("terminate called without an active exception"), after
                # everything was committed (0 in 70 runs with this). Collecting them here,
                # while torch.distributed is up, frees them now (tested:
                # test_finalize_frees_what_async_saves_left_while_torch_distributed_is_up).
                gc.collect()
