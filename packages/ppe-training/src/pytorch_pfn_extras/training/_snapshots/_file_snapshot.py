"""The DEFAULT / DISTRIBUTED snapshot extension: one file written through the writer."""

from __future__ import annotations

import functools
import os
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._snapshots._base import SnapshotExtension, SnapshotOptions
from pytorch_pfn_extras.training._snapshots._files import SnapshotFiles
from pytorch_pfn_extras.training._snapshots._layout import describe, inspect
from pytorch_pfn_extras.training._snapshots._load import DamagedSnapshot, load_file
from pytorch_pfn_extras.training._snapshots._mode import SnapshotMode
from pytorch_pfn_extras.training._snapshots._own import (
    Entry,
    ForeignEntries,
    entry,
    is_snapshot_file,
)
from pytorch_pfn_extras.training._snapshots._storage import Storage, snapshot_out_dir
from pytorch_pfn_extras.training._writer_util import (
    file_system_of,
    finalize_writer,
    initialize_writer,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.writing import Writer


def _check_options(options: SnapshotOptions) -> None:
    """Check the options every snapshot mode shares."""
    filename, condition, n_retains = options.filename, options.condition, options.n_retains
    autoload, saver_rank = options.autoload, options.saver_rank
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
        options: SnapshotOptions,
        *,
        mode: SnapshotMode,
        snapshot_on_error: bool,
        default_name: str,
    ) -> None:
        self._files: SnapshotFiles | None = None
        if options.autoload or options.n_retains > 0:
            assert isinstance(options.filename, str)
            self._files = SnapshotFiles(options.filename)
        super().__init__(options)
        self._mode = mode
        self._snapshot_on_error = snapshot_on_error
        self._default_name = default_name
        self._is_saver = True  # DISTRIBUTED: the other ranks wait for the saver (self._comm)
        self._hooked: Writer | None = None
        self._hook: Callable[[str], None] | None = None
        self._bad_files: set[str] = set()  # damaged: skipped by autoload and retention
        self._own_files: set[str] = set()  # snapshot files known to be ours (see _is_own_file)
        self._foreign = ForeignEntries(_what(mode))
        self._ready = False  # set up (initialize, or a forced save without it)

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
        """The directory snapshots go to (:func:`snapshot_out_dir`: a writer of the
        snapshot's own with its own file system writes under its ``out_dir`` there, as in
        PPE 0.9), its bucket checked on S3."""
        return snapshot_out_dir(self._writer, manager)

    def initialize(self, manager: ExtensionsManagerProtocol) -> str | None:
        """Check ``saver_rank``, register the cleanup, and autoload the newest snapshot.

        Returns:
            The name of the snapshot loaded (relative to the output directory), or
            ``None`` when none was (no ``autoload``, or no snapshot yet).
        """
        storage = self._set_up(manager)
        if not self.autoload or storage is None:
            return None
        self._autoload(manager, storage)
        if self.resumed_from is None:
            return None
        return os.path.relpath(self.resumed_from, self._out)

    def _set_up(self, manager: ExtensionsManagerProtocol) -> Storage | None:
        """Everything :meth:`initialize` does but autoload; return the storage autoload and
        retention use (``None`` without them)."""
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
        self._ready = True
        if self._files is None:
            return None
        storage = self._storage_of(writer)  # a writer retention cannot use fails here
        if self._n_retains > 0 and self._is_saver and self._hooked is None:
            add_hook = getattr(writer, "add_post_save_hook", None)
            if callable(add_hook):
                # Retention runs once each write is complete, through what wrote it.
                self._hook = functools.partial(self._after_save, storage=storage, out=self._out)
                add_hook(self._hook)
                self._hooked = writer
        return storage

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
        # Only a snapshot proven damaged is skipped; an OSError while reading it (a file
        # system's hiccup) stops the run, so that a good snapshot is never passed over and
        # later overwritten by a run that started from an older one.
        assert self._files is not None
        for path in self._files.list(storage, self._out):
            try:
                state = self._read(storage, path)
            except DamagedSnapshot as error:
                self._bad_files.add(path)
                message = (
                    f"cannot load the snapshot {error.path!r}: it {error.reason}; falling back "
                    "to the previous snapshot"
                )
                warnings.warn(message, UserWarning, stacklevel=2)
                continue
            self._target_of(manager).load_state_dict(state)
            self.resumed_from = path
            return

    def _read(self, storage: Storage, path: str) -> Any:
        """The state in the snapshot ``path``: a file, or (DISTRIBUTED) this rank's file of a
        directory written by ppe-training 0.1 in that mode.

        Raises:
            DamagedSnapshot: ``path`` is damaged, or a directory this mode does not load.
            OSError: The file system failed to read it.
        """
        if not storage.isdir(path):
            return load_file(storage, path)
        found = inspect(storage, path)
        manifest = found.manifest
        comm = self._comm
        if manifest is None or manifest.mode != "DISTRIBUTED" or comm is None:
            reason = describe(path, found).removeprefix(f"{path!r} ")
            raise DamagedSnapshot(path, f"{reason}; {_what(self._mode)} loads a snapshot file")
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
        if self._condition is not None and not self._condition():
            return
        self.save(manager)

    def save(self, manager: ExtensionsManagerProtocol) -> None:
        """Write a snapshot now, whatever ``condition`` says (if this process is the saver)."""
        if not self._ready:
            self._set_up(manager)  # not initialized: its trigger had finished at the start
        self._save(manager)
        self.saved_at = manager.iteration
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
        self._check_replaceable(storage, os.path.normpath(path))
        state = self._target_of(manager).state_dict()
        writer(name, out, state)
        self._own_files.add(os.path.normpath(path))
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
        self._own_files.add(path)
        kept = 1  # ``path``, and then the newest of the others that are snapshots of ours
        for old in files.list(storage, out):
            if old == path or old in self._bad_files or not self._is_own_file(storage, old):
                continue
            if kept < self._n_retains:
                kept += 1
            else:
                storage.remove(old)

    def _check_replaceable(self, storage: Storage, path: str) -> None:
        """Refuse to write over ``path`` unless it is missing or a snapshot file of ours."""
        kind = entry(storage, path)
        if kind is Entry.MISSING or (
            kind is Entry.FILE and self._is_own_file(storage, path, warn=False)
        ):
            return
        if kind is Entry.FILE and path in self._bad_files:  # damaged beyond recognition
            self._set_aside(storage, path)
            return
        if kind is Entry.DIRECTORY:
            what = describe(path, inspect(storage, path))
        elif kind is Entry.LINK:
            what = f"{path!r} is a symbolic link"
        else:
            what = f"{path!r} is a file that is not a snapshot (it does not start as one)"
        message = (
            f"cannot write the snapshot: {what}, where the snapshot file goes, and a snapshot "
            "never replaces what it cannot read as its own; move it away, or choose another "
            "filename"
        )
        raise FileExistsError(message)

    def _set_aside(self, storage: Storage, path: str) -> None:
        """Keep the snapshot file ``path``, which autoload found damaged and skipped, as
        ``<path>.damaged-<n>`` (a name no snapshot template matches), so that the new snapshot
        can take its name without destroying it."""
        number = 1
        while storage.exists(f"{path}.damaged-{number}"):
            number += 1
        aside = f"{path}.damaged-{number}"
        storage.fs.rename(path, aside)
        self._bad_files.discard(path)
        message = (
            f"{_what(self._mode)}: the damaged snapshot {path!r}, which autoload skipped, is "
            f"kept as {aside!r}; the new snapshot takes its name"
        )
        warnings.warn(message, UserWarning, stacklevel=3)

    def _is_own_file(self, storage: Storage, path: str, *, warn: bool = True) -> bool:
        """Whether ``path`` is a snapshot file this extension may replace or delete: one it
        wrote, or a regular file that starts as a snapshot (checked once per path; a symbolic
        link, a directory or another file is left alone, with a warning unless ``warn`` is
        false)."""
        if path in self._own_files:
            return True
        kind = entry(storage, path)
        if kind is Entry.FILE:
            try:
                if is_snapshot_file(storage, path):
                    self._own_files.add(path)
                    return True
                why = "does not start as a snapshot file"
            except OSError as error:  # not known to be ours: kept, and tried again next time
                why = f"cannot be read ({type(error).__name__}: {error})"
        elif kind is Entry.MISSING:
            return False
        else:
            why = f"is a {kind.value}"
        if warn:
            self._foreign.skip(path, why)
        return False

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
        """Wait for the snapshot's own writer, if it was given one, and unregister the
        retention from the writer's post-save hooks (a writer used again by another run
        keeps no hook, nor target, of this one)."""
        if self._writer is not None:
            finalize_writer(self._writer)
        hooked, self._hooked = self._hooked, None
        if hooked is not None and self._hook is not None:
            finalize_writer(hooked)  # its last snapshots' retention runs first
            # A writer of the user's own with add_post_save_hook may lack its counterpart.
            remove_hook = getattr(hooked, "remove_post_save_hook", None)
            if callable(remove_hook):
                remove_hook(self._hook)
            self._hook = None


def _what(mode: SnapshotMode) -> str:
    return f"snapshot(snapshot_mode=SnapshotMode.{mode.name})"
