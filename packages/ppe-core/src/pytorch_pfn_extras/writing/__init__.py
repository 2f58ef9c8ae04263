"""Writers: crash-safe, optionally asynchronous saving of snapshots and logs.

A writer is called as ``writer(filename, out_dir, target, savefun=None,
append=False)`` and writes ``savefun(target, fileobj)`` to ``out_dir/filename``
through a temporary file, fsync and an atomic rename, so the destination is
never missing or half-written. :class:`SimpleWriter` writes synchronously;
:class:`ThreadWriter`, :class:`ProcessWriter`, :class:`ThreadQueueWriter` and
:class:`ProcessQueueWriter` write in the background a copy of the target taken
at call time, holding a bounded number of pending writes (one for the thread
and process writers, ``max_pending`` for the queue writers);
:class:`TensorBoardWriter` writes log scalars as TensorBoard events.
:class:`StandardWriter` and :class:`QueueWriter` are the bases to subclass for
other kinds of workers (``create_worker``; ``create_queue``,
``create_consumer``, ``consume``).

Temporary files follow one convention (:func:`temporary_name`,
:func:`is_temporary_file`, :func:`hold_lease`, :func:`remove_stale_temporaries`),
which code writing next to a writer's output can share.

Every writer takes ``fs=``: the local filesystem by default, any object with the
:class:`FileSystem` methods, a pfio file system or an fsspec one (S3 through
``pfio.v2.from_url("s3://...")`` or ``s3fs.S3FileSystem``; see
:class:`PfioFileSystem` and :class:`FsspecFileSystem`).
"""

from __future__ import annotations

from pytorch_pfn_extras.writing._adapters import (
    FsspecFileSystem,
    PfioFileSystem,
    adapt_file_system,
)
from pytorch_pfn_extras.writing._cleanup import remove_stale_temporaries, stale_temporaries
from pytorch_pfn_extras.writing._errors import RemoteTraceback
from pytorch_pfn_extras.writing._fs import FileSystem, LocalFileSystem
from pytorch_pfn_extras.writing._lease import hold_lease
from pytorch_pfn_extras.writing._names import is_temporary_file, temporary_base, temporary_name
from pytorch_pfn_extras.writing._process_queue_writer import ProcessQueueWriter
from pytorch_pfn_extras.writing._queue_writer import QueueWriter, ThreadQueueWriter
from pytorch_pfn_extras.writing._simple_writer import SimpleWriter
from pytorch_pfn_extras.writing._standard_writer import (
    ProcessWriter,
    StandardWriter,
    ThreadWriter,
)
from pytorch_pfn_extras.writing._tensorboard_writer import TensorBoardWriter
from pytorch_pfn_extras.writing._writer_base import Writer

__all__ = [
    "FileSystem",
    "FsspecFileSystem",
    "LocalFileSystem",
    "PfioFileSystem",
    "ProcessQueueWriter",
    "ProcessWriter",
    "QueueWriter",
    "RemoteTraceback",
    "SimpleWriter",
    "StandardWriter",
    "TensorBoardWriter",
    "ThreadQueueWriter",
    "ThreadWriter",
    "Writer",
    "adapt_file_system",
    "hold_lease",
    "is_temporary_file",
    "remove_stale_temporaries",
    "stale_temporaries",
    "temporary_base",
    "temporary_name",
]
