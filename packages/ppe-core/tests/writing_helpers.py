"""Module-level savefuns and tasks for the writing tests.

They live in an importable module (not in a test file) so that writer
processes started with ``spawn`` can unpickle them.
"""

from __future__ import annotations

import os
import signal
import time
from typing import IO, Any

import torch


class SaveFailedError(Exception):
    """A picklable error raised by :func:`failing_save`."""


class TwoArgumentError(Exception):
    """An error that does not survive pickling (its __init__ needs two arguments)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.code = code


def write_bytes(data: bytes, fileobj: IO[bytes]) -> None:
    fileobj.write(data)


def failing_save(target: Any, fileobj: IO[bytes]) -> None:
    fileobj.write(b"partial content")
    raise SaveFailedError(f"cannot save a {type(target).__name__}")


def unpicklable_error_save(target: Any, fileobj: IO[bytes]) -> None:
    raise TwoArgumentError(7, "disk on fire")


def slow_save(target: Any, fileobj: IO[bytes]) -> None:
    # Gives the caller time to mutate the target before it is serialised.
    time.sleep(0.3)
    torch.save(target, fileobj)


def suicidal_save(target: Any, fileobj: IO[bytes]) -> None:
    fileobj.write(b"partial content")
    fileobj.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def recording_task(
    filename: str, out_dir: str, target: Any, *, savefun: Any = None, append: bool = False
) -> None:
    """A QueueWriter task writing ``repr(target)`` as text."""
    path = os.path.join(out_dir, filename)
    os.makedirs(out_dir, exist_ok=True)
    with open(path, "a" if append else "w") as f:
        f.write(f"{target!r}\n")


class GatedSave:
    """``torch.save`` of ``{"i": i, ...}`` targets, each held until the test releases it.

    Write ``i`` sets ``entered[i]``, then waits for ``release[i]`` (threading or
    multiprocessing events: inherited by forked writer processes).
    """

    def __init__(self, entered: list[Any], release: list[Any]) -> None:
        self.entered = entered
        self.release = release

    def __call__(self, target: Any, fileobj: IO[bytes]) -> None:
        i = target["i"]
        self.entered[i].set()
        if not self.release[i].wait(timeout=120):
            raise TimeoutError(f"write {i} was never released")
        torch.save(target, fileobj)


#: Set by a test in its own process: a forked writer process inherits it, a spawned one
#: starts from a fresh interpreter without it.
started_by = "a fresh interpreter"


def save_with_origin(target: Any, fileobj: IO[bytes]) -> None:
    """``torch.save`` of the target and of :data:`started_by` as the writer process sees it."""
    torch.save({"target": target, "started_by": started_by}, fileobj)
