"""Per-iteration overhead of ``ExtensionsManager.run_iteration()`` with the usual extensions.

Two measurements:

1. A tiny MLP (batch 16, 32 features) trained by a hand-written loop, and by the same loop
   inside ``manager.run_iteration()`` with LogReport, ProgressBar and PrintReport (printing
   to a null stream) and a tensor-valued ``ppe.reporting.report`` each iteration: the
   overhead in microseconds per iteration and the ratio of the two loops.
2. ``run_iteration()`` with an empty body (reporting a 0-d tensor) and the same three
   extensions, against an empty Python loop: the manager's own cost per iteration
   (target: under 25 us; the published PPE takes about 58 us).

Each repetition trains ``--iterations`` iterations both ways, interleaved one epoch at a time
(bare epoch, managed epoch, managed epoch, bare epoch, ...), so that every managed epoch
includes its log write and table row, and a slow drift of the machine's load affects both
sides alike. The figures are medians over all epochs of all repetitions; the overhead is the
median of the paired differences.

With ``--device cuda`` the managed loops run under ``torch.cuda.set_sync_debug_mode("warn")``:
a device synchronization inside an iteration (other than LogReport's once per epoch) would
print a warning.

Usage: ``python benchmarks/loop_overhead.py [--iterations 10000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions

Block = Callable[[int], None]


def _manager(
    out_dir: str, iterations: int, iters_per_epoch: int, sink: IO[str]
) -> ExtensionsManager:
    return ExtensionsManager(
        {},
        {},
        iterations / iters_per_epoch,
        iters_per_epoch=iters_per_epoch,
        out_dir=out_dir,
        extensions=[
            extensions.LogReport(),
            extensions.ProgressBar(out=sink),
            extensions.PrintReport(out=sink),
        ],
    )


@contextlib.contextmanager
def _sync_check(device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _timed(block: Block, n: int, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    block(n)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def mlp_blocks(device: torch.device) -> tuple[Block, Callable[[ExtensionsManager], Block]]:
    """The bare loop, and the managed loop for a given manager, ``n`` iterations at a time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    t = torch.randn(16, 1, device=device)
    mse = torch.nn.functional.mse_loss
    report = reporting.report

    def bare(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            loss = mse(model(x), t)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()

    def managed(manager: ExtensionsManager) -> Block:
        def block(n: int) -> None:
            for _ in range(n):
                with manager.run_iteration():
                    optimizer.zero_grad()
                    loss = mse(model(x), t)
                    report({"train/loss": loss})
                    loss.backward()  # type: ignore[no-untyped-call]
                    optimizer.step()

        return block

    return bare, managed


def empty_blocks(device: torch.device) -> tuple[Block, Callable[[ExtensionsManager], Block]]:
    value = torch.zeros((), device=device)
    report = reporting.report

    def bare(n: int) -> None:
        for _ in range(n):
            pass

    def managed(manager: ExtensionsManager) -> Block:
        def block(n: int) -> None:
            for _ in range(n):
                with manager.run_iteration():
                    report({"value": value})

        return block

    return bare, managed


def measure(
    blocks: tuple[Block, Callable[[ExtensionsManager], Block]],
    args: argparse.Namespace,
    repeats: int,
    out_dir: str,
    sink: IO[str],
) -> tuple[float, float, float]:
    """Median seconds per iteration: bare, managed, and their paired difference."""
    bare, make_managed = blocks
    epoch = args.iters_per_epoch
    device = torch.device(args.device)
    bare_times: list[float] = []
    managed_times: list[float] = []
    differences: list[float] = []
    for repeat in range(repeats + 1):  # the first one warms up
        manager = _manager(out_dir, args.iterations, epoch, sink)
        managed = make_managed(manager)
        with _sync_check(device):
            for i in range(args.iterations // epoch):
                if (i + repeat) % 2:
                    m = _timed(managed, epoch, device)
                    b = _timed(bare, epoch, device)
                else:
                    b = _timed(bare, epoch, device)
                    m = _timed(managed, epoch, device)
                if repeat:
                    bare_times.append(b / epoch)
                    managed_times.append(m / epoch)
                    differences.append((m - b) / epoch)
        assert manager.stop_trigger  # the run ended: the last log entry was written
    return (
        statistics.median(bare_times),
        statistics.median(managed_times),
        statistics.median(differences),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--iters-per-epoch", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3, help="MLP repetitions")
    parser.add_argument("--empty-repeats", type=int, default=5, help="empty-body repetitions")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    if args.iterations % args.iters_per_epoch:
        parser.error("--iterations must be a multiple of --iters-per-epoch")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    us = 1e6
    with tempfile.TemporaryDirectory() as out_dir, open(os.devnull, "w") as sink:
        bare, managed, overhead = measure(mlp_blocks(device), args, args.repeats, out_dir, sink)
        print(
            f"MLP (batch 16, 32 features), {args.iterations} iterations x {args.repeats}, "
            f"device {device}, LogReport + ProgressBar + PrintReport, loss tensor reported:"
        )
        print(f"  hand-written loop      {bare * us:8.2f} us/iteration")
        print(f"  with the manager       {managed * us:8.2f} us/iteration")
        print(f"  overhead               {overhead * us:8.2f} us/iteration")
        print(f"  ratio                  {(bare + overhead) / bare:8.3f}")
        empty = empty_blocks(device)
        _, _, overhead = measure(empty, args, args.empty_repeats, out_dir, sink)
        print(
            f"Empty run_iteration() reporting a 0-d tensor, {args.iterations} iterations x "
            f"{args.empty_repeats}:"
        )
        print(f"  manager cost           {overhead * us:8.2f} us/iteration  (target < 25)")


if __name__ == "__main__":
    main()
