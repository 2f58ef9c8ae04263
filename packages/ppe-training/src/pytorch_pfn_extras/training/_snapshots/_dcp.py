"""Reading and writing a sharded snapshot with torch.distributed.checkpoint (DCP).

Imported only when a sharded snapshot is written or read (``torch.distributed.checkpoint``
takes most of a second to import). DCP writes through the snapshot's :class:`Storage`: its
``FileSystemWriter``/``FileSystemReader`` on a local disk, its fsspec writer and reader
(``s3://...``) on object storage.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, NamedTuple

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from pytorch_pfn_extras.training._snapshots import _torch_api
from pytorch_pfn_extras.training._snapshots._load import read_error
from pytorch_pfn_extras.training._snapshots._staging import MirrorStager, staged_writer
from pytorch_pfn_extras.training._snapshots._storage import Storage


class Group(NamedTuple):
    """Where the collectives of a snapshot run: ``group`` (``None`` with ``no_dist``)."""

    rank: int
    world_size: int
    group: Any
    no_dist: bool


SINGLE = Group(0, 1, None, no_dist=True)


def _unreachable(storage: Storage, directory: str) -> TypeError:
    return TypeError(
        f"a sharded snapshot writes {directory!r} through torch.distributed.checkpoint, which "
        f"reaches a local disk, a pfio S3 file system or an fsspec one; {storage.fs!r} is "
        "none of them (use SnapshotMode.DEFAULT or DISTRIBUTED, which write through any "
        "writer's fs)"
    )


def writer_for(storage: Storage, directory: str, stager: MirrorStager | None = None) -> Any:
    """DCP's storage writer of ``directory`` on ``storage`` (waiting for ``stager``'s copy).

    Raises:
        FileNotFoundError: ``directory`` is on S3, in a bucket that does not exist.
    """
    local = storage.local(directory)
    if local is not None:
        if stager is None:
            return FileSystemWriter(local)
        return staged_writer(FileSystemWriter, stager, local)
    remote = storage.fsspec(directory)
    if remote is None:
        raise _unreachable(storage, directory)
    # DCP's fsspec writer makes its directory with fsspec's makedirs, which creates a missing
    # bucket on s3fs: a mistyped name must be an error, raised before anything is written.
    storage.check_bucket(directory)
    url, options = remote
    if stager is None:
        return _torch_api.fsspec_storage(url, options, write=True)
    return staged_writer(_torch_api.fsspec_writer_class(), stager, url, **options)


def reader_for(storage: Storage, directory: str) -> Any:
    """DCP's storage reader of ``directory`` on ``storage``."""
    local = storage.local(directory)
    if local is not None:
        return FileSystemReader(local)
    remote = storage.fsspec(directory)
    if remote is None:
        raise _unreachable(storage, directory)
    return _torch_api.fsspec_storage(*remote, write=False)


def save(
    state: dict[str, Any],
    storage: Storage,
    directory: str,
    group: Group,
    *,
    stager: MirrorStager | None = None,
) -> Future[Any] | None:
    """Write ``state`` into ``directory`` with every rank of ``group`` (a collective).

    Args:
        stager: For an asynchronous save, the :class:`MirrorStager` that copies the state in
            memory before this returns; the write goes on in a background thread.

    Returns:
        The future of an asynchronous write; ``None`` after a synchronous one.
    """
    writer = writer_for(storage, directory, stager)
    if group.no_dist:
        quiet_single_process()
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


def load(state: dict[str, Any], storage: Storage, directory: str, group: Group) -> None:
    """``dcp.load`` of ``state`` (filled in place; its ``Stateful`` values load themselves),
    its failures named by rank."""
    reader = reader_for(storage, directory)
    if group.no_dist:
        quiet_single_process()
    try:
        dcp_load(state, storage_reader=reader, process_group=group.group, no_dist=group.no_dist)
    except CheckpointException as error:  # a BaseException: make it an ordinary error
        message = f"loading the sharded snapshot {directory!r} failed: {_failures(error)}"
        raise RuntimeError(message) from error


def quiet_single_process() -> None:
    # DCP warns on every call without a process group that it assumes one process, which is
    # what ``no_dist`` asks for. The filter is global (an asynchronous save warns from its
    # thread, after any catch_warnings() would have ended); it matches that message only.
    warnings.filterwarnings(
        "ignore",
        message="torch.distributed is disabled, unavailable or uninitialized",
        category=UserWarning,
    )


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


# ---------------------------------------------------------------- checking


def read_metadata(storage: Storage, directory: str) -> Metadata:
    """The DCP metadata of a snapshot directory.

    Raises:
        FileNotFoundError: The directory has no ``.metadata`` (not a sharded snapshot).
        ValueError: The ``.metadata`` is damaged (the message names the snapshot).
        OSError: The file system failed to read it (the message names the snapshot).
    """
    try:
        return reader_for(storage, directory).read_metadata()  # type: ignore[no-any-return]
    except FileNotFoundError as error:
        message = (
            f"the sharded snapshot {directory!r} has no .metadata (written by "
            "torch.distributed.checkpoint when every rank finished): it is damaged or not a "
            "sharded snapshot"
        )
        raise FileNotFoundError(message) from error
    except OSError as error:
        raise read_error(os.path.join(directory, ".metadata"), error) from error
    except Exception as error:  # pickle's errors, EOFError, ...: what a damaged file raises
        message = (
            f"the sharded snapshot {directory!r} is damaged: its .metadata (written by "
            f"torch.distributed.checkpoint) cannot be read ({type(error).__name__}: {error}). "
            "Copy the whole directory again, or move it away to resume from the previous "
            "snapshot"
        )
        raise ValueError(message) from error


def check_files(storage: Storage, directory: str, metadata: Metadata) -> None:
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
        size = storage.size(os.path.join(directory, name))
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


def tree_paths(metadata: Metadata) -> dict[str, tuple[Any, ...]]:
    """The path in the saved (nested) state dict of each item of the metadata."""
    data = metadata.planner_data
    if not isinstance(data, Mapping):
        return {key: tuple(key.split(".")) for key in metadata.state_dict_metadata}
    return {key: tuple(path) for key, path in data.items()}


def under(metadata: Metadata, *prefix: str) -> list[tuple[tuple[Any, ...], str]]:
    """The items whose path starts with ``prefix``: (the rest of the path, the key)."""
    n = len(prefix)
    return [
        (path[n:], key)
        for key, path in tree_paths(metadata).items()
        if tuple(str(p) for p in path[:n]) == prefix
    ]
