"""Which process of a job writes the files of a reporting extension, and under which name."""

from __future__ import annotations

import os

import torch.distributed as dist

from pytorch_pfn_extras.distributed._collective import is_initialized


class RankFiles:
    """Decides whether this process writes a reporting extension's files, and their names.

    In a job of several processes (an initialized default process group of more than one
    rank) every rank runs the same extensions, and files they all wrote into one output
    directory would be overwritten or interleaved. So by default only global rank 0 writes;
    the other ranks keep their results in memory. With ``per_rank``, every rank writes its
    own file, named with its rank before the suffix (``log.rank1.jsonl`` for ``log.jsonl``,
    ``log.rank1`` for ``log``). Without a process group, or in a group of one, the process
    writes and names are unchanged.

    The process group is looked at on the first write after :meth:`reset` (which the
    extensions call in ``initialize``): it may be created after the extension. The answer is
    kept, so writes exchange nothing and iterations do not pay for it.

    Args:
        owner: Name of the extension, for errors.
        per_rank: Every rank writes its own file.

    Raises:
        TypeError: ``per_rank`` is not a bool.
    """

    __slots__ = ("_suffix", "_writes", "per_rank")

    def __init__(self, owner: str, per_rank: bool) -> None:
        if not isinstance(per_rank, bool):
            message = f"{owner}: per_rank must be a bool, got {per_rank!r}"
            raise TypeError(message)
        self.per_rank = per_rank
        self._writes: bool | None = None
        self._suffix = ""

    def reset(self) -> None:
        """Look at the process group again at the next write."""
        self._writes = None

    def name(self, filename: str) -> str | None:
        """The name under which this process writes ``filename``; ``None``: it writes no file."""
        writes = self._writes
        if writes is None:
            writes = self._decide()
        if not writes:
            return None
        if not self._suffix:
            return filename
        stem, extension = os.path.splitext(filename)
        return f"{stem}{self._suffix}{extension}"

    def _decide(self) -> bool:
        if is_initialized() and dist.get_world_size() > 1:
            rank = dist.get_rank()
            self._writes = self.per_rank or rank == 0
            self._suffix = f".rank{rank}" if self.per_rank else ""
        else:
            self._writes, self._suffix = True, ""
        return self._writes
