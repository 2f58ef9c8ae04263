"""``SimpleWriter``: synchronous, crash-safe writes."""

from __future__ import annotations

from typing import Any

import torch

from pytorch_pfn_extras.writing._atomic import save_to_bytes
from pytorch_pfn_extras.writing._fs import LocalFileSystem
from pytorch_pfn_extras.writing._writer_base import (
    SaveFun,
    Writer,
    check_savefun,
    resolve_savefun,
)

__all__ = ["SimpleWriter"]


class SimpleWriter(Writer):
    """Write synchronously: the call returns once the file is complete on disk.

    A replacing write is atomic (see :meth:`Writer.save`). An ``append=True`` write
    on the local filesystem (when :attr:`writes_in_place`) costs the new data only:
    ``savefun`` writes to a memory buffer whose bytes are added to the end of the
    file with one ``write`` (``O_APPEND``), without copying the file nor fsync'ing.
    After a killed process every append that returned is in the file, earlier
    content is never changed, and the append in progress may have left a prefix of
    its data at the end (a torn last record that stays there, before later appends:
    readers must skip it, as ``LogReport`` does). A power loss may lose the latest
    appends. Other filesystems and subclasses overriding ``__call__`` append by
    copying the file atomically, fsync'ed (see :meth:`Writer.save`).

    Args:
        savefun: ``savefun(target, fileobj, **kwds)``; ``torch.save`` by default
            (also when ``None``).
        fs: Filesystem to write to; the local filesystem by default.
        out_dir: Default output directory (see :meth:`Writer.initialize`).
        **kwds: Keyword arguments passed to every ``savefun`` call (for
            example ``pickle_protocol=4`` for ``torch.save``).

    Example:
        >>> writer = SimpleWriter()
        >>> writer("model.pt", "result", model.state_dict())
        >>> writer("log.jsonl", "result", b'{"loss": 0.1}\\n',
        ...        savefun=lambda data, f: f.write(data), append=True)
    """

    def __init__(
        self,
        savefun: SaveFun | None = torch.save,
        fs: Any = None,
        out_dir: str = "",
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        self._savefun = resolve_savefun(savefun, type(self).__name__)
        self._kwds = kwds

    @property
    def writes_in_place(self) -> bool:
        """``True`` on the local filesystem, unless a subclass overrides ``__call__``."""
        return type(self.fs) is LocalFileSystem and type(self).__call__ is SimpleWriter.__call__

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Write ``target`` to ``out_dir/filename`` now (appends: see the class docstring)."""
        fun = self._savefun if savefun is None else check_savefun(savefun, type(self).__name__)
        if append and self.writes_in_place:
            self.write_in_place(filename, out_dir, save_to_bytes(target, fun, self._kwds))
            return
        self.save(filename, out_dir, target, fun, append, **self._kwds)
