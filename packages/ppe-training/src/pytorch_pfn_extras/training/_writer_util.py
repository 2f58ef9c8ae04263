"""What the manager and its extensions need of a writer besides calling it.

The manager accepts a :class:`~pytorch_pfn_extras.writing.Writer` or any callable
``writer(filename, out_dir, target, *, savefun=None, append=False)`` (as PPE does). Such a
callable has no ``fs``: it writes to the local file system, where extensions that read
back or remove what it wrote (snapshot ``autoload`` and ``n_retains``, a resumed
``LogReport``) look for its files.
"""

from __future__ import annotations

from typing import Any

from pytorch_pfn_extras.writing import FileSystem, LocalFileSystem

__all__ = ["check_writer", "file_system_of", "finalize_writer", "initialize_writer"]


def check_writer(writer: Any, owner: str) -> None:
    """Raise a ``TypeError`` naming ``writer`` unless it can be called to write."""
    if not callable(writer):
        message = (
            f"{owner}: writer must be a pytorch_pfn_extras.writing.Writer or a callable "
            f"writer(filename, out_dir, target, *, savefun=None, append=False), got {writer!r}"
        )
        raise TypeError(message)


def initialize_writer(writer: Any, out_dir: str) -> None:
    """Call ``writer.initialize(out_dir)`` if the writer has it (a plain callable has not)."""
    initialize = getattr(writer, "initialize", None)
    if callable(initialize):
        initialize(out_dir)


def finalize_writer(writer: Any) -> None:
    """Call ``writer.finalize()`` if the writer has it (a plain callable has not)."""
    finalize = getattr(writer, "finalize", None)
    if callable(finalize):
        finalize()


def file_system_of(writer: Any, needs: tuple[str, ...], purpose: str) -> FileSystem:
    """The file system ``writer`` writes to: its ``fs``, else the local file system.

    Args:
        writer: A writer, or a plain callable one (which has no ``fs``).
        needs: The methods of the file system the caller uses (``"listdir"``, ``"remove"``...).
        purpose: What the caller does with them, for the error message.

    Raises:
        TypeError: The writer's ``fs`` lacks one of ``needs`` (the message names them).
    """
    fs = getattr(writer, "fs", None)
    if fs is None:
        return LocalFileSystem()
    missing = [name for name in needs if not callable(getattr(fs, name, None))]
    if missing:
        message = (
            f"{purpose} through the writer's file system, but the fs of "
            f"{type(writer).__name__} ({fs!r}) lacks {', '.join(missing)}"
        )
        raise TypeError(message)
    return fs  # type: ignore[no-any-return]
