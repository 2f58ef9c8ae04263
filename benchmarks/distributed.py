"""Per-iteration time of ppe's DistributedDataParallel against torch's, 2 processes on gloo.

Both wrap copies of the same MLP (``--width`` hidden units, ``--layers`` hidden layers, about
``layers * width**2`` parameters) in the same 2-process gloo group on 127.0.0.1, and train it
with SGD on the same per-rank batches (``--batch`` rows of ``--width`` features): forward,
backward (which averages the gradients over the ranks) and the optimizer step. Both all-reduce
gradient buckets while the backward pass runs; ppe's buckets carry a "has a gradient" flag per
parameter, which also allows graphs that differ between ranks without a negotiation collective.

The two are interleaved ``--rounds`` times, ``--iterations`` iterations each (after a warm-up
round); each rank times its iterations, and the slower rank's time counts (the collective
makes the ranks wait for each other). Printed: the median per-iteration time of each and their
ratio (ppe / torch; target: at most 1.1), measured in this run.

The sharded snapshot times on 2 and 4 ranks against one rank saving everything are
measured by ``benchmarks/sharded_snapshot.py``.

Usage: ``python benchmarks/distributed.py [--rounds 7] [--iterations 30] [--width 512]
[--layers 4] [--batch 64] [--threads 1]``. It starts its two workers with
``python -m torch.distributed.run --standalone --nproc-per-node 2``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from pytorch_pfn_extras.nn.parallel import DistributedDataParallel


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _model(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    modules: list[torch.nn.Module] = []
    for _ in range(layers):
        modules += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    modules.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*modules)


def _time_iterations(
    model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    dist.barrier()
    start = time.perf_counter()
    for x, y in batches:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slower rank's time
    return float(elapsed.item()) / len(batches)


def _worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    base = _model(args.width, args.layers)
    ppe_ddp = DistributedDataParallel(copy.deepcopy(base))
    torch_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    generator = torch.Generator().manual_seed(rank)
    batches = [
        (
            torch.randn(args.batch, args.width, generator=generator),
            torch.randn(args.batch, 1, generator=generator),
        )
        for _ in range(args.iterations)
    ]
    _time_iterations(ppe_ddp, batches)  # warm-up
    _time_iterations(torch_ddp, batches)
    times: dict[str, list[float]] = {"ppe": [], "torch": []}
    for round_ in range(args.rounds):
        order = ("ppe", "torch") if round_ % 2 == 0 else ("torch", "ppe")
        for name in order:
            model = ppe_ddp if name == "ppe" else torch_ddp
            times[name].append(_time_iterations(model, batches))
    if rank == 0:
        n_params = sum(p.numel() for p in base.parameters())
        ppe_ms = statistics.median(times["ppe"]) * 1e3
        torch_ms = statistics.median(times["torch"]) * 1e3
        print(
            f"2 processes, gloo, MLP {args.layers}x{args.width} ({n_params:,} parameters), "
            f"batch {args.batch} per rank, {args.threads} thread(s) per process"
        )
        print(f"torch DistributedDataParallel: {torch_ms:.3f} ms/iteration")
        print(f"ppe   DistributedDataParallel: {ppe_ms:.3f} ms/iteration")
        print(f"ratio ppe/torch: {ppe_ms / torch_ms:.3f} (target <= 1.1)")
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.worker:
        _worker(args)
        return 0
    forwarded = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--worker"]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        os.path.abspath(__file__),
        "--worker",
        *forwarded,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
