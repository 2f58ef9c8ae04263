"""Multiprocessing helpers shared by the process writers."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

import torch

from pytorch_pfn_extras.writing._atomic import SaveFun, write_atomic
from pytorch_pfn_extras.writing._errors import encode_exception
from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._snapshot import PackedTarget, unpack

__all__ = [
    "MPContext",
    "fork_guard",
    "resolve_context",
    "single_threaded_worker",
    "start_process",
    "write_packed",
]

MPContext = str | BaseContext | None

fork_guard = threading.RLock()
"""Held by thread writers while they write and by process writers while they start a process.

A child forked while another thread is inside an import (``torch.save`` imports lazily)
inherits that module's import lock, held by a thread that does not exist in the child: the
child deadlocks on its first import of the module. Forking only between thread writes avoids
that for every writer of this package.
"""


def resolve_context(mp_context: MPContext, owner: str) -> BaseContext:
    """The multiprocessing context for ``mp_context`` (the default one for ``None``)."""
    if mp_context is None:
        return multiprocessing.get_context()
    if isinstance(mp_context, str):
        methods = multiprocessing.get_all_start_methods()
        if mp_context not in methods:
            message = (
                f"{owner}: mp_context must be one of {methods} or a context, got {mp_context!r}"
            )
            raise ValueError(message)
        return multiprocessing.get_context(mp_context)
    if isinstance(mp_context, BaseContext):
        return mp_context
    message = (
        f"{owner}: mp_context must be a start method name, a multiprocessing context or "
        f"None, got {mp_context!r}"
    )
    raise TypeError(message)


def start_process(start: Callable[[], None], context: BaseContext, owner: str, what: str) -> None:
    """Start a process with ``start()``, turning a pickling failure (spawn) into a clear TypeError."""
    try:
        with fork_guard:
            start()
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        message = (
            f"{owner}: the {what} must be picklable to be sent to a writer process "
            f"(start method {context.get_start_method()!r}): {exc}; define "
            "functions at module level instead of lambdas or local functions"
        )
        raise TypeError(message) from exc


def single_threaded_worker() -> None:
    """Keep a writer process off the OpenMP thread pool.

    A child forked after the parent ran parallel tensor ops inherits a broken
    OpenMP pool, and its first parallel op (a large copy) would deadlock; this
    is what DataLoader workers do too.
    """
    torch.set_num_threads(1)


def write_packed(
    conn: Any,
    fs: FileSystem,
    path: str,
    packed: PackedTarget,
    savefun: SaveFun,
    append: bool,
    savefun_kwargs: dict[str, Any],
) -> None:
    """Entry point of a ``ProcessWriter`` worker: write, then report to ``conn``.

    A failed write is sent to ``conn`` and the process exits with code 1, as a process
    whose target raised does (without printing the traceback: the parent reports it).
    """
    single_threaded_worker()
    failure = None
    try:
        write_atomic(fs, path, unpack(packed), savefun, append, savefun_kwargs)
    except BaseException as exc:
        failure = encode_exception(exc)
    try:
        conn.send(failure)
    finally:
        conn.close()
    if failure is not None:
        raise SystemExit(1)
