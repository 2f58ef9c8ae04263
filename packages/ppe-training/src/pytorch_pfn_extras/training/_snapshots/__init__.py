"""Snapshots: saving the training state and resuming from it (private; the public names are
``pytorch_pfn_extras.training.extensions.snapshot``, ``snapshot_object``, ``SnapshotMode``
and the converter ``pytorch_pfn_extras.training.convert_snapshot``).

Modules, each with one job:

- ``_extension``: ``snapshot()`` and ``snapshot_object()``, which check the options and make
  the extension of the mode; ``_mode``: ``SnapshotMode``;
- ``_file_snapshot``: the DEFAULT / DISTRIBUTED extension (one file through the writer);
- ``_base``: ``SnapshotExtension``, what every snapshot extension offers the code that makes
  one run (the iteration it last saved at, a save whatever its condition, waiting for its
  writes);
- ``_sharded``: the SHARDED extension (one directory written by every rank through DCP);
- ``_storage``: the writer's file system as snapshots use it (local, pfio, fsspec);
- ``_files``: which names of a directory a filename template matches, newest first;
- ``_layout``: what a snapshot directory holds, committing one, retention;
- ``_load``: reading one snapshot file;
- ``_comm``: the ranks of a snapshot and their collectives;
- ``_dcp``: DCP's storage writers and readers, its save and load, checking a directory;
- ``_manager_state``: the manager's state in DCP's layout, and loading it back;
- ``_rank_states``: per-rank state loaded on another number of ranks;
- ``_tree``: the one traversal of a state tree; ``_staging``: the asynchronous save's copy;
- ``_convert``: sharded snapshot <-> one file (the converter's engine);
- ``_torch_api``: every private torch API used, in one place.
"""
