"""The writers a snapshot can use, at PPE's public module path.

They live in :mod:`pytorch_pfn_extras.writing`; this module re-exports them.

Example:
    >>> from pytorch_pfn_extras.training.extensions.snapshot_writers import ThreadWriter
    >>> manager.extend(extensions.snapshot(writer=ThreadWriter()))
"""

from __future__ import annotations

from pytorch_pfn_extras.writing import (
    ProcessQueueWriter,
    ProcessWriter,
    QueueWriter,
    SimpleWriter,
    StandardWriter,
    TensorBoardWriter,
    ThreadQueueWriter,
    ThreadWriter,
    Writer,
)

__all__ = [
    "ProcessQueueWriter",
    "ProcessWriter",
    "QueueWriter",
    "SimpleWriter",
    "StandardWriter",
    "TensorBoardWriter",
    "ThreadQueueWriter",
    "ThreadWriter",
    "Writer",
]
