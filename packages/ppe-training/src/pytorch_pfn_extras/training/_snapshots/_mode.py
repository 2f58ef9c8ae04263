"""SnapshotMode: how a snapshot is written (one file, or one directory written by every rank)."""

from __future__ import annotations

import enum


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
