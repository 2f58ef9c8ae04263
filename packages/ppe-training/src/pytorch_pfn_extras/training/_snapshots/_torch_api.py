"""Every private torch API the snapshots use, in one place.

Tested with torch 2.13.0 (CPU, CI) and 2.11 (CUDA, the GPU check). Each has a fallback or a
clear error where a torch version lacks it; a torch upgrade that breaks one breaks only this
module.

- ``ProcessGroup._get_backend(device).options._timeout``: the timeout the user gave
  ``init_process_group``, which the snapshot's own process group reuses (torch keeps it
  private; the fallback is torch's default timeout).
- ``torch._foreach_copy_``: one fused copy of the asynchronous stager's tensors into its
  mirror (the fallback copies tensor by tensor).
- ``Tensor._version``: the in-place change counter that proves the deferred copy of the
  optimizer state was not torn.
- ``torch.distributed.checkpoint._fsspec_filesystem.FsspecWriter`` / ``FsspecReader``: DCP's
  storage writer and reader over fsspec (object storage), public classes in a private module.
- ``AsyncStager._synchronize_after_execute``: the attribute of DCP's stager protocol that
  says whether DCP waits for the staging (``_staging.MirrorStager`` sets it to ``False``;
  it cannot live here, being part of the class).
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist


def default_timeout() -> datetime.timedelta:
    """The timeout of the default process group (``init_process_group(timeout=...)``)."""
    world = dist.group.WORLD
    for device in ("cpu", "cuda"):
        try:
            backend = world._get_backend(torch.device(device))  # type: ignore[union-attr]
            timeout = backend.options._timeout
        except Exception:  # torch keeps it private: fall back to torch's default
            continue
        if isinstance(timeout, datetime.timedelta):
            return timeout
    return dist.default_pg_timeout


def copy_all(targets: list[torch.Tensor], sources: list[torch.Tensor], non_blocking: bool) -> None:
    """``target.copy_(source)`` for each pair, fused where torch can."""
    foreach_copy = getattr(torch, "_foreach_copy_", None)
    if callable(foreach_copy):
        foreach_copy(targets, sources, non_blocking=non_blocking)
        return
    for target, source in zip(targets, sources, strict=True):
        target.copy_(source, non_blocking=non_blocking)


def version(tensor: torch.Tensor) -> int:
    """The in-place change counter of ``tensor``."""
    return int(tensor._version)


def fsspec_storage(url: str, options: dict[str, Any], *, write: bool) -> Any:
    """DCP's fsspec storage writer (``write``) or reader of ``url``.

    Raises:
        ImportError: This torch has no fsspec storage, or fsspec is not installed.
    """
    try:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
    except ImportError as error:
        message = (
            f"a sharded snapshot on {url!r} needs torch.distributed.checkpoint's fsspec "
            "storage: install fsspec and the client of the storage (pip install "
            f"'ppe-training[s3]' for S3) ({error})"
        )
        raise ImportError(message) from error
    if write:
        return FsspecWriter(url, **options)
    return FsspecReader(url, **options)


def fsspec_writer_class() -> type:
    """``FsspecWriter`` (for the asynchronous stager's writer), see :func:`fsspec_storage`."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    return FsspecWriter
