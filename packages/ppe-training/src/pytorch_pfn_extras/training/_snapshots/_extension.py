"""snapshot and snapshot_object: check the options and make the snapshot extension of the mode."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import Extension, check_keywords
from pytorch_pfn_extras.training._snapshots._base import Filename, SnapshotOptions
from pytorch_pfn_extras.training._snapshots._file_snapshot import _check_options, _Snapshot
from pytorch_pfn_extras.training._snapshots._mode import SnapshotMode
from pytorch_pfn_extras.training._writer_util import check_writer
from pytorch_pfn_extras.writing import SimpleWriter

if TYPE_CHECKING:
    from pytorch_pfn_extras.writing import Writer

__all__ = ["SnapshotMode", "snapshot", "snapshot_object"]


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
    are ignored) is loaded when training starts; if its content is damaged (truncated,
    corrupted, not a snapshot), the previous one is tried, with a warning naming it. An
    ``OSError`` while reading it (an NFS or S3 hiccup) is raised, naming the file: it is
    not damage, and skipping it would let the run overwrite a good snapshot. Loading uses
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
    shard is an error naming it; a directory that never committed (no readable manifest)
    is skipped with a warning and left as it is.

    Every mode writes, deletes (``n_retains``) and autoloads through the writer's file
    system (``writer.fs``: a local disk, or object storage through pfio or fsspec). A
    snapshot never deletes or replaces what it cannot read as its own (a file that does
    not start as a snapshot, a symbolic link, a directory without a readable manifest):
    a name that collides with one is an ``FileExistsError`` naming it, and retention
    leaves it, with a warning. What survives which fault, proved by injecting each one:
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
            only its ``fs`` and ``out_dir`` are used (DCP writes). As in PPE 0.9, it writes
            under its own ``out_dir``: on a file system with a root of its own (pfio, s3fs)
            relative to that root (``""``, the default, is the root: the prefix of
            ``pfio.v2.from_url("s3://bucket/prefix")``), never under the manager's; on the
            local disk, into the manager's when it has none.
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
    options = SnapshotOptions(target, filename, condition, writer, n_retains, autoload, saver_rank)
    if snapshot_mode is not SnapshotMode.SHARDED:
        options = dataclasses.replace(options, writer=_writer_for(savefun, writer))
        _check_options(options)
        return _Snapshot(
            options,
            mode=snapshot_mode,
            snapshot_on_error=snapshot_on_error,
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
    _check_options(options)
    from pytorch_pfn_extras.training._snapshots._sharded import _ShardedSnapshot

    return _ShardedSnapshot(options, async_save=async_save)


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
