"""Memory of a queue writer when snapshots are requested faster than the disk takes them.

A manager trains an 8 MB model (``Linear(2048, 1024)``, SGD) and writes a snapshot
every iteration through a queue writer whose ``savefun`` takes ``--write-ms`` per
write (``torch.save`` then a sleep: a disk slower than the loop). Each queued write
holds a copy of the state, so an unbounded queue grows with the backlog; a bounded
one (``max_pending``) blocks the loop instead. The resident memory of the training
process, of its consumer process (``ProcessQueueWriter``) and the growth of the
machine's shared memory (where process writers' pending copies wait) are printed
after some iterations, then the peak resident memory of the training process.

    python benchmarks/queue_writer_memory.py [--writer ThreadQueueWriter]
        [--iterations 600] [--write-ms 40] [--max-pending N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import IO, Any

import torch

from pytorch_pfn_extras import writing
from pytorch_pfn_extras.training import ExtensionsManager, extensions


class SlowSave:
    """``torch.save``, then a sleep: a disk that takes ``seconds`` per snapshot."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, target: Any, fileobj: IO[bytes]) -> None:
        torch.save(target, fileobj)
        time.sleep(self.seconds)


def _rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _shmem_mib() -> float:
    # Shared memory of the whole machine: where process writers' pending copies live.
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _children_rss_mib() -> float:
    total = 0.0
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as listing:
            children = listing.read().split()
    except OSError:
        return 0.0
    for child in children:
        try:
            total += _rss_mib(child)
        except OSError:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", default="ThreadQueueWriter")
    parser.add_argument("--iterations", type=int, default=600)
    parser.add_argument("--write-ms", type=float, default=40.0)
    parser.add_argument("--max-pending", type=int, default=None)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Linear(2048, 1024)  # 2.1 M float32 parameters: 8 MB
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    writer_class = getattr(writing, args.writer)
    options = {} if args.max_pending is None else {"max_pending": args.max_pending}
    writer = writer_class(SlowSave(args.write_ms / 1000), **options)
    # The last iteration finalizes the writer: measure before it.
    checkpoints = set(range(150, args.iterations, 150)) | {args.iterations - 1}
    print(
        f"{args.writer}({', '.join(f'{k}={v}' for k, v in options.items())}), "
        f"{args.write_ms:g} ms per write, one snapshot per iteration"
    )
    print(f"{'iteration':>9} {'RSS MiB':>8} {'+consumer':>10} {'+shm':>6} {'s/iter':>7}")
    shm_before = _shmem_mib()
    with tempfile.TemporaryDirectory() as out:
        manager = ExtensionsManager(
            {"main": model}, {"main": optimizer}, 1, iters_per_epoch=args.iterations, out_dir=out
        )
        manager.extend(extensions.snapshot(writer=writer, n_retains=2), trigger=(1, "iteration"))
        start = time.perf_counter()
        x = torch.randn(16, 2048)
        while not manager.stop_trigger:
            with manager.run_iteration():
                optimizer.zero_grad()
                model(x).square().mean().backward()
                optimizer.step()
            iteration = manager.iteration
            if iteration in checkpoints:
                elapsed = (time.perf_counter() - start) / iteration
                print(
                    f"{iteration:>9} {_rss_mib():>8.0f} {_children_rss_mib():>10.0f} "
                    f"{_shmem_mib() - shm_before:>6.0f} {elapsed:>7.3f}"
                )
        writer.finalize()
    print(f"peak RSS of the training process: {_rss_mib(field='VmHWM'):.0f} MiB")


if __name__ == "__main__":
    main()
