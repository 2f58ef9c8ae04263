"""snapshot and snapshot_object: save the training state; autoload it on restart."""

from __future__ import annotations

import enum
import functools
import os
import types
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._extension import Extension, check_keywords
from pytorch_pfn_extras.training._snapshots._base import Filename, SnapshotExtension
from pytorch_pfn_extras.training._snapshots._files import SnapshotFiles
from pytorch_pfn_extras.training._snapshots._layout import describe, inspect
from pytorch_pfn_extras.training._snapshots._load import is_disallowed_global, load_file
from pytorch_pfn_extras.training._snapshots._storage import Storage
from pytorch_pfn_extras.training._writer_util import (
    check_writer,
    file_system_of,
    finalize_writer,
    initialize_writer,
)
from pytorch_pfn_extras.writing import SimpleWriter

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._snapshots._comm import Comm
    from pytorch_pfn_extras.writing import Writer


class SnapshotMode(enum.Enum):
    """How :func:`snapshot` writes, as in PPE 0.9.

    Attributes:
        DEFAULT: One file, through the writer (by ``saver_rank`` alone with
            ``torch.distributed``; every rank loads it).
        DISTRIBUTED: One file in the DEFAULT format, written through the writer by
            ``saver_rank`` (0 by default) while the other ranks wait for it; every rank
            loads it. (Directories of ``rank_<r>.pt`` written by ppe-training 0.1 in this
            mode still load, on the same number of ranks.)
        SHARDED: One directory per snapshot written by every rank through
            ``torch.distributed.checkpoint`` (each rank its shards of FSDP2 models and
            optimizers, replicated tensors once, and its own per-rank state), committed
            once every rank finished; it resumes on any number of ranks. Autoload also
            reads PPE 0.9's SHARDED directories (one file per rank and a ``complete``
            marker) on the same number of ranks.
    """

    DEFAULT = 1
    DISTRIBUTED = 2
    SHARDED = 3


class _StateObjects:
    """A dict of state objects saved and loaded as one target (``snapshot_object({...})``)."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        for name, obj in objects.items():
            if not callable(getattr(obj, "state_dict", None)):
                message = (
                    f"snapshot_object target[{name!r}] ({type(obj).__name__}) has no "
                    "state_dict(): each value of a dict target must have state_dict() and "
                    "load_state_dict()"
                )
                raise TypeError(message)
        self._objects = dict(objects)

    def state_dict(self) -> dict[str, Any]:
        return {name: obj.state_dict() for name, obj in self._objects.items()}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        missing = sorted(set(self._objects) - set(to_load))
        if missing:
            message = f"the snapshot has no state for {missing} (it holds {sorted(to_load)})"
            raise KeyError(message)
        for name, obj in self._objects.items():
            obj.load_state_dict(to_load[name])


def _check_options(
    filename: Any, condition: Any, n_retains: Any, autoload: bool, saver_rank: Any
) -> None:
    """Check the options every snapshot mode shares."""
    if not isinstance(filename, str) and not callable(filename):
        message = f"snapshot filename must be a str or a callable, got {filename!r}"
        raise TypeError(message)
    if condition is not None and not callable(condition):
        message = f"snapshot condition must be a callable or None, got {condition!r}"
        raise TypeError(message)
    if not is_int(n_retains) or n_retains == 0:
        message = f"n_retains must be a positive integer, or -1 to keep all, got {n_retains!r}"
        raise ValueError(message)
    if saver_rank is not None and (not is_int(saver_rank) or saver_rank < 0):
        message = f"saver_rank must be a rank (an integer >= 0) or None, got {saver_rank!r}"
        raise ValueError(message)
    if (autoload or n_retains > 0) and not isinstance(filename, str):
        message = (
            "autoload and n_retains need a str filename template to find the "
            f"snapshots, got the callable {filename!r}"
        )
        raise ValueError(message)
    if isinstance(filename, str) and (autoload or n_retains > 0):
        SnapshotFiles(filename)  # a template it cannot list snapshots of fails here


class _Snapshot(SnapshotExtension):
    """The extension returned by :func:`snapshot` in the DEFAULT and DISTRIBUTED modes: one
    file through the writer."""

    def __init__(
        self,
        target: Any,
        filename: Filename,
        *,
        mode: SnapshotMode,
        condition: Callable[[], bool] | None,
        writer: Writer | None,
        snapshot_on_error: bool,
        n_retains: int,
        autoload: bool,
        saver_rank: int | None,
        default_name: str,
    ) -> None:
        _check_options(filename, condition, n_retains, autoload, saver_rank)
        self._files: SnapshotFiles | None = None
        if autoload or n_retains > 0:
            assert isinstance(filename, str)
            self._files = SnapshotFiles(filename)
        self._target = target
        self._filename = filename
        self._mode = mode
        self._condition = condition
        self._writer = writer
        self._snapshot_on_error = snapshot_on_error
        self._n_retains = n_retains
        self.autoload = autoload
        self.loads_state = autoload
        self._saver_rank = saver_rank
        self._default_name = default_name
        self._is_saver = True
        self._comm: Comm | None = None  # DISTRIBUTED: the ranks that wait for the saver
        self._hooked: Writer | None = None
        self._bad_files: set[str] = set()
        self._out = ""
        self.resumed_from: str | None = None

    @property
    def default_name(self) -> str:
        """``'_Snapshot'``, as in PPE (snapshots of PPE name its state so)."""
        return self._default_name

    def _writer_of(self, manager: ExtensionsManagerProtocol) -> Writer:
        writer = self._writer if self._writer is not None else manager.writer
        if writer is None:
            message = "snapshot needs a writer: the manager has none and none was given"
            raise RuntimeError(message)
        return writer

    def _storage_of(self, writer: Writer) -> Storage:
        """The file system ``writer`` writes to, checked for what autoload and retention use
        (a writer without ``fs``, a plain callable, writes to the local file system)."""
        needs: tuple[str, ...] = ("listdir", "open") if self.autoload else ()
        if self._n_retains > 0:
            needs += ("listdir", "remove")
        options = " and ".join(
            option
            for option, used in (
                ("autoload=True", self.autoload),
                (f"n_retains={self._n_retains}", self._n_retains > 0),
            )
            if used
        )
        return Storage(file_system_of(writer, needs, f"snapshot({options}) finds its files"))

    def _target_of(self, manager: ExtensionsManagerProtocol) -> Any:
        return manager if self._target is None else self._target

    def _out_of(self, manager: ExtensionsManagerProtocol) -> str:
        """The directory snapshots go to: the own writer's ``out_dir`` if it has one (as in
        PPE), the manager's ``out`` otherwise."""
        own = getattr(self._writer, "out_dir", "") if self._writer is not None else ""
        return own if isinstance(own, str) and own else manager.out

    def initialize(self, manager: ExtensionsManagerProtocol) -> str | None:
        """Check ``saver_rank``, register the cleanup, and autoload the newest snapshot.

        Returns:
            The name of the snapshot loaded (relative to the output directory), or
            ``None`` when none was (no ``autoload``, or no snapshot yet).
        """
        self._out = self._out_of(manager)
        if self._mode is SnapshotMode.DISTRIBUTED:
            if self._comm is None:
                from pytorch_pfn_extras.training._snapshots._comm import Comm

                self._comm = Comm(self._saver_rank, _what(self._mode))
            self._is_saver = self._comm.is_coordinator
        elif self._saver_rank is not None:
            self._is_saver = self._check_saver_rank()
        writer = self._writer_of(manager)
        if self._writer is not None:
            initialize_writer(self._writer, self._out)
        if self._files is None:
            return None
        storage = self._storage_of(writer)  # a writer retention cannot use fails here
        if self._n_retains > 0 and self._is_saver and self._hooked is None:
            add_hook = getattr(writer, "add_post_save_hook", None)
            if callable(add_hook):
                # Retention runs once each write is complete, through what wrote it.
                add_hook(functools.partial(self._after_save, storage=storage, out=self._out))
                self._hooked = writer
        if not self.autoload:
            return None
        self._autoload(manager, storage)
        if self.resumed_from is None:
            return None
        return os.path.relpath(self.resumed_from, self._out)

    def _check_saver_rank(self) -> bool:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            message = (
                f"snapshot(saver_rank={self._saver_rank}) needs torch.distributed to be "
                "initialized (init_process_group) before training starts"
            )
            raise RuntimeError(message)
        world_size = dist.get_world_size()
        if self._saver_rank is not None and self._saver_rank >= world_size:
            message = (
                f"snapshot saver_rank={self._saver_rank} is not a rank of the process group "
                f"of size {world_size}"
            )
            raise ValueError(message)
        return dist.get_rank() == self._saver_rank

    def _autoload(self, manager: ExtensionsManagerProtocol, storage: Storage) -> None:
        assert self._files is not None
        for path in self._files.list(storage, self._out):
            try:
                state = self._read(storage, path)
            except Exception as error:
                if is_disallowed_global(error):
                    raise
                self._bad_files.add(path)
                message = (
                    f"cannot load the snapshot {path!r} ({type(error).__name__}: {error}); "
                    "falling back to the previous snapshot"
                )
                warnings.warn(message, UserWarning, stacklevel=2)
                continue
            self._target_of(manager).load_state_dict(state)
            self.resumed_from = path
            return

    def _read(self, storage: Storage, path: str) -> Any:
        """The state in the snapshot ``path``: a file, or (DISTRIBUTED) this rank's file of a
        directory written by ppe-training 0.1 in that mode."""
        if not storage.isdir(path):
            return load_file(storage, path)
        found = inspect(storage, path)
        manifest = found.manifest
        comm = self._comm
        if manifest is None or manifest.mode != "DISTRIBUTED" or comm is None:
            message = f"{describe(path, found)}; {_what(self._mode)} loads a snapshot file"
            raise IsADirectoryError(message)
        if manifest.world_size != comm.world_size:
            message = (
                f"the snapshot {path!r} holds each rank's own state, written by "
                f"{manifest.world_size} ranks (ppe-training 0.1's DISTRIBUTED directories), "
                f"and resumes only on {manifest.world_size} ranks, not {comm.world_size}"
            )
            raise ValueError(message)
        return load_file(storage, os.path.join(path, f"rank_{comm.rank}.pt"))

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Write a snapshot (if ``condition`` allows it and this process is the saver)."""
        self.ran_at = manager.iteration
        if self._condition is not None and not self._condition():
            return
        self._save(manager)
        if self._comm is not None:
            # DISTRIBUTED, as in PPE 0.9: the other ranks wait until the saver has written.
            self._comm.barrier("the end of the snapshot's write")

    def _save(self, manager: ExtensionsManagerProtocol) -> None:
        if not self._is_saver:
            return
        filename = self._filename
        name = filename.format(manager) if isinstance(filename, str) else filename(manager)
        writer = self._writer_of(manager)
        out = self._out or self._out_of(manager)
        path = os.path.join(out, name)
        storage = Storage.of(writer)
        if storage.isdir(path):
            found = inspect(storage, path)
            message = (
                f"cannot write the snapshot: {describe(path, found)}, where the snapshot file "
                "goes, and a snapshot never replaces a directory; move it away, or choose "
                "another filename"
            )
            raise FileExistsError(message)
        state = self._target_of(manager).state_dict()
        writer(name, out, state)
        if self._n_retains > 0 and self._hooked is not writer:
            # A writer without post-save hooks (a plain callable) is synchronous: the file
            # is complete once it returns, so clean up now, where it wrote.
            self._after_save(path, storage=self._storage_of(writer), out=out)

    def wait_for_writes(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait until the writer has written every snapshot (a background writer's
        ``finalize()``, which leaves it usable)."""
        if self._is_saver:
            finalize_writer(self._writer_of(manager))

    def _after_save(self, path: str, *, storage: Storage, out: str) -> None:
        """Delete the oldest snapshot files beyond ``n_retains`` once ``path`` is complete.

        Args:
            path: The file just written (the writer's post-save hooks get every file it
                writes: only this snapshot's files count).
            storage: The file system the writer wrote ``path`` to.
            out: The output directory the snapshot wrote into.
        """
        files = self._files
        if files is None or not files.contains(path, out):
            return
        path = os.path.normpath(path)
        self._bad_files.discard(path)  # rewritten: complete now
        good = [
            p
            for p in files.list(storage, out)
            if p not in self._bad_files and (p == path or not storage.isdir(p))
        ]
        for old in good[self._n_retains :]:
            if old != path:
                storage.remove(old)

    def on_error(
        self,
        manager: ExtensionsManagerProtocol,
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        """Write a snapshot of the failed state if ``snapshot_on_error`` (the saver rank
        alone: the other ranks may not reach it)."""
        if self._snapshot_on_error:
            self._save(manager)

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait for the snapshot's own writer, if it was given one."""
        if self._writer is not None:
            finalize_writer(self._writer)


def _what(mode: SnapshotMode) -> str:
    return f"snapshot(snapshot_mode=SnapshotMode.{mode.name})"


def _writer_for(savefun: Any, writer: Writer | None) -> Writer | None:
    if savefun is not None and writer is not None:
        message = "pass either savefun or writer to snapshot, not both (a writer has its savefun)"
        raise TypeError(message)
    if savefun is not None:
        return SimpleWriter(savefun=savefun)
    if writer is not None:
        check_writer(writer, "snapshot")
    return writer


def snapshot(
    savefun: Any = None,
    filename: Filename = "snapshot_iter_{.iteration}",
    *,
    target: Any = None,
    condition: Callable[[], bool] | None = None,
    writer: Writer | None = None,
    snapshot_on_error: bool = False,
    n_retains: int = -1,
    autoload: bool = False,
    saver_rank: int | None = None,
    snapshot_mode: SnapshotMode = SnapshotMode.DEFAULT,
    async_save: bool = False,
) -> Extension:
    """Return an extension that saves the manager's state, to resume training later.

    The extension runs once per epoch by default, after every other extension of the
    iteration (priority ``-100``). It writes ``target.state_dict()`` (the manager's:
    models, optimizers, extensions, triggers, stop trigger, state objects) to
    ``out_dir/filename`` through the writer, atomically.

    With ``autoload``, the newest complete snapshot in the output directory (by the
    iteration in its name, never by modification time; writers' hidden temporary files
    are ignored) is loaded when training starts; if it cannot be read (truncated,
    corrupted), the previous one is tried, with a warning. Loading uses
    ``torch.load(..., weights_only=True, map_location='cpu')``: a snapshot may hold only
    tensors, numbers, strings, ``None`` and lists/dicts of them; register other classes
    with ``torch.serialization.add_safe_globals``.

    With ``snapshot_mode=SnapshotMode.DISTRIBUTED`` (as in PPE 0.9) the saver rank (0 by
    default) writes the same file while the other ranks wait for it. With
    ``SnapshotMode.SHARDED`` every rank writes the directory ``out_dir/filename/`` together
    through ``torch.distributed.checkpoint`` (the models and optimizers by
    ``get_state_dict``: FSDP2 shards, DDP and plain models once; the training state from the
    saver rank; each rank's ``state_objects``); it is committed once every rank finished, and
    resumes on any number of ranks; its autoload also reads PPE 0.9's SHARDED directories.
    Every rank must run these at the same iterations; a rank that does not arrive within
    the process group's timeout is named in the error. A committed directory with a missing
    shard is an error naming it.

    Every mode writes, deletes (``n_retains``) and autoloads through the writer's file
    system (``writer.fs``: a local disk, or object storage through pfio or fsspec). A
    snapshot never deletes or replaces what it cannot read as a snapshot: a name that
    collides with such a file or directory is an error naming it. See
    ``docs/sharded-snapshots.md``.

    Args:
        savefun: ``savefun(target, fileobj)``; a :class:`~pytorch_pfn_extras.writing.
            SimpleWriter` with it is used. Exclusive with ``writer``.
        filename: Name of the file, formatted with the manager (``{.iteration}``,
            ``{.epoch}``), or a callable ``fn(manager) -> str``.
        target: Object to save instead of the manager (anything with ``state_dict``).
        condition: A callable without arguments; the snapshot is skipped when it returns
            false.
        writer: Writer to use instead of the manager's (e.g. a
            :class:`~pytorch_pfn_extras.writing.ThreadWriter` to write in the background),
            or a callable ``writer(filename, out_dir, target, *, savefun=None,
            append=False)`` that writes before it returns (to the local file system:
            ``autoload`` and ``n_retains`` look for its files there). With ``SHARDED``
            only its ``fs`` and ``out_dir`` are used (DCP writes).
        snapshot_on_error: Also write a snapshot when an iteration raises.
        n_retains: Keep at most this many snapshots (``-1`` keeps all). Old files are
            deleted only once the new one is complete, so the last good snapshot always
            remains: by the writer's post-save hook (``Writer.add_post_save_hook``; a
            ``Writer`` subclass overriding ``__call__`` must write through ``save``, which
            runs the hooks), or right after the call for a writer without hooks. They are
            found and deleted through the writer's ``fs``.
        autoload: Load the newest loadable snapshot before training starts.
        saver_rank: With ``torch.distributed``, only this rank writes; every rank loads.
            In the DISTRIBUTED and SHARDED modes, the rank that writes (and, SHARDED, writes
            the training state and commits), ``0`` by default.
        snapshot_mode: :class:`SnapshotMode` (``DEFAULT``: one file).
        async_save: With ``SHARDED``, write in the background (``torch.distributed.
            checkpoint.async_save``): the iteration waits only while the state is copied
            in memory. Never two saves in flight: a save waits for the previous one; a
            failed one raises at the next save or when training ends.

    Returns:
        The snapshot extension.

    Raises:
        TypeError: Both ``savefun`` and ``writer``; ``savefun`` with ``SHARDED``; a
            ``writer`` that is not callable. When training starts: ``autoload`` or
            ``n_retains`` with a writer whose ``fs`` lacks ``listdir``, ``open`` (autoload)
            or ``remove`` (n_retains); ``SHARDED`` on a file system that
            ``torch.distributed.checkpoint`` cannot reach.
        ValueError: A bad ``n_retains``, or ``autoload``/``n_retains`` with a callable
            filename; ``async_save`` without ``SHARDED``; ``snapshot_on_error`` with
            ``SHARDED``.
        FileExistsError: When saving: the snapshot's name is taken by something it cannot
            read as a snapshot (a directory where a file goes, or the reverse).

    Example:
        >>> manager.extend(extensions.snapshot(n_retains=3, autoload=True))
    """
    return _make(
        target,
        filename,
        savefun=savefun,
        condition=condition,
        writer=writer,
        snapshot_on_error=snapshot_on_error,
        n_retains=n_retains,
        autoload=autoload,
        saver_rank=saver_rank,
        snapshot_mode=snapshot_mode,
        async_save=async_save,
    )


def _make(
    target: Any,
    filename: Filename,
    *,
    savefun: Any,
    condition: Callable[[], bool] | None,
    writer: Writer | None,
    snapshot_on_error: bool,
    n_retains: int,
    autoload: bool,
    saver_rank: int | None,
    snapshot_mode: Any,
    async_save: Any,
) -> Extension:
    if not isinstance(snapshot_mode, SnapshotMode):
        message = f"snapshot_mode must be a SnapshotMode, got {snapshot_mode!r}"
        raise TypeError(message)
    if not isinstance(async_save, bool):
        message = f"async_save must be a bool, got {async_save!r}"
        raise TypeError(message)
    if async_save and snapshot_mode is not SnapshotMode.SHARDED:
        message = (
            f"async_save=True needs snapshot_mode=SnapshotMode.SHARDED, got {snapshot_mode}; "
            "a DEFAULT snapshot writes in the background with writer=ThreadWriter()"
        )
        raise ValueError(message)
    if isinstance(target, Mapping) and not callable(getattr(target, "state_dict", None)):
        target = _StateObjects(target)
    if snapshot_mode is not SnapshotMode.SHARDED:
        return _Snapshot(
            target,
            filename,
            mode=snapshot_mode,
            condition=condition,
            writer=_writer_for(savefun, writer),
            snapshot_on_error=snapshot_on_error,
            n_retains=n_retains,
            autoload=autoload,
            saver_rank=saver_rank,
            default_name="_Snapshot",
        )
    if savefun is not None:
        message = (
            "SnapshotMode.SHARDED writes through torch.distributed.checkpoint with every "
            "rank, not through a savefun; savefun applies to SnapshotMode.DEFAULT and "
            "DISTRIBUTED (pass writer= to choose the file system)"
        )
        raise TypeError(message)
    if writer is not None:
        check_writer(writer, "snapshot")
    if snapshot_on_error:
        message = (
            "snapshot_on_error=True needs SnapshotMode.DEFAULT or DISTRIBUTED (one file "
            "written by the saver rank alone); SnapshotMode.SHARDED needs every rank, which "
            "a failed run may not have"
        )
        raise ValueError(message)
    _check_options(filename, condition, n_retains, autoload, saver_rank)
    from pytorch_pfn_extras.training._snapshots._sharded import _ShardedSnapshot

    return _ShardedSnapshot(
        target,
        filename,
        condition=condition,
        writer=writer,
        n_retains=n_retains,
        autoload=autoload,
        saver_rank=saver_rank,
        async_save=async_save,
    )


_OBJECT_KWARGS = (
    "condition",
    "writer",
    "snapshot_on_error",
    "n_retains",
    "autoload",
    "saver_rank",
    "snapshot_mode",
    "async_save",
)


def snapshot_object(
    target: Any, filename: Filename, savefun: Any = None, **kwargs: Any
) -> Extension:
    """Return an extension that saves ``target.state_dict()`` (a model, an optimizer...).

    Like :func:`snapshot` with an explicit target; ``autoload`` loads the newest file
    into ``target``. The target may also be a dict of such objects (``{"model": model,
    "optimizer": optimizer}``): the file holds ``{name: state_dict}`` and ``autoload``
    loads each object's part.

    Args:
        target: Object with ``state_dict`` (and ``load_state_dict`` for autoload), or a
            dict of them.
        filename: Name of the file, formatted with the manager, or a callable.
        savefun: ``savefun(target, fileobj)``; exclusive with ``writer``.
        **kwargs: The keyword arguments of :func:`snapshot`: ``condition``, ``writer``,
            ``snapshot_on_error``, ``n_retains``, ``autoload``, ``saver_rank``,
            ``snapshot_mode``, ``async_save``. With ``SnapshotMode.SHARDED`` the
            directory holds ``target.state_dict()`` (DTensor shards as they are).

    Returns:
        The snapshot extension.

    Raises:
        TypeError: An unknown keyword argument, both ``savefun`` and ``writer``, or a dict
            target holding an object without ``state_dict()``.

    Example:
        >>> manager.extend(extensions.snapshot_object(model, "model_{.epoch}.pt"))
    """
    check_keywords("snapshot_object", kwargs, _OBJECT_KWARGS)
    return _make(
        target,
        filename,
        savefun=savefun,
        condition=kwargs.get("condition"),
        writer=kwargs.get("writer"),
        snapshot_on_error=kwargs.get("snapshot_on_error", False),
        n_retains=kwargs.get("n_retains", -1),
        autoload=kwargs.get("autoload", False),
        saver_rank=kwargs.get("saver_rank"),
        snapshot_mode=kwargs.get("snapshot_mode", SnapshotMode.DEFAULT),
        async_save=kwargs.get("async_save", False),
    )
