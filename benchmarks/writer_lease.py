"""What the lease of a temporary adds to a write, against a thread start and a small save.

Every atomic write holds a lease on its temporary (``writing.hold_lease``): a small file
written next to it and removed after the rename, refreshed by one thread of the process.
Measured, interleaved (a slow drift of the machine's load affects all alike), as medians of
per-round medians:

1. ``hold_lease`` entered and left, around nothing: the lease's whole cost to a write;
2. a ``threading.Thread`` started and joined: the budget (issue 33: a write may not get
   slower by more than a thread start);
3. a small ``SimpleWriter`` save (a 4x3 ``Linear``'s state), with and without fsync (a
   file system whose ``fsync``/``fsync_dir`` do nothing), lease included.

Usage: ``python benchmarks/writer_lease.py [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import torch

from pytorch_pfn_extras import writing


class NoSyncFileSystem(writing.LocalFileSystem):
    """The local disk without fsync: what remains is the writer's own cost."""

    def fsync(self, fileobj: IO[Any]) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=50)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="ppe-lease-bench-")
    fs = writing.LocalFileSystem()
    temporary = os.path.join(directory, writing.temporary_name("snapshot"))
    state = torch.nn.Linear(4, 3).state_dict()
    synced, unsynced = writing.SimpleWriter(), writing.SimpleWriter(fs=NoSyncFileSystem())

    def lease() -> None:
        with writing.hold_lease(fs, temporary):
            pass

    def thread() -> None:
        worker = threading.Thread(target=int)
        worker.start()
        worker.join()

    cases: dict[str, Callable[[], None]] = {
        "hold_lease enter+exit": lease,
        "threading.Thread start+join": thread,
        "SimpleWriter save, no fsync": lambda: unsynced("snapshot", directory, state),
        "SimpleWriter save, fsync": lambda: synced("snapshot", directory, state),
    }
    medians: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            times = []
            for _ in range(args.per_round):
                start = time.perf_counter()
                case()
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times))
    for name, values in medians.items():
        print(f"{name:30s} {statistics.median(values) * 1e6:8.0f} us")
    ratio = statistics.median(medians["hold_lease enter+exit"]) / statistics.median(
        medians["threading.Thread start+join"]
    )
    print(f"lease / thread start: {ratio:.2f} (target: at most 1)")


if __name__ == "__main__":
    main()
