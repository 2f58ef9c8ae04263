"""What ``extensions.PreemptionHandler`` costs per iteration, and how long a preemption takes.

Three measurements, each printed with the figures of this run:

1. One process: ``manager.run_iteration()`` with an empty body, with and without the handler
   (and a snapshot extension whose trigger does not fire, as a job has), interleaved in
   blocks of ``--iterations`` iterations over ``--rounds`` rounds: the handler's cost per
   iteration is the median of the paired differences (target: at most 1 us).
2. Two processes on gloo (started with ``python -m torch.distributed.run --standalone
   --nproc-per-node 2``): a DDP-wrapped MLP (``--width`` units, 4 layers) trained inside
   ``run_iteration()``, with and without the handler (its default ``check_interval``),
   interleaved in rounds of ``--dist-iterations``; the slower rank's time counts. Printed: the median time per iteration of each,
   their difference, and the spread (quartiles) of the rounds without the handler: the
   handler should be within that noise.
3. The time a preemption takes: one process trains an MLP of about ``--params`` parameters
   with Adam, and the signal (SIGTERM to itself) arrives in an iteration; the figure is the
   time from the end of that iteration's step to the end of the loop (the snapshot written
   and committed, the extensions finalized), for a ``DEFAULT`` snapshot: what a grace period
   (Kubernetes' ``terminationGracePeriodSeconds``, Slurm's ``--signal`` lead time) must
   cover, besides the iteration in flight.

Usage: ``python benchmarks/preemption.py [--rounds 11] [--iterations 2000] [--width 256]
[--params 20000000] [--no-dist]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch

from pytorch_pfn_extras.training import ExtensionEntry, ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--dist-iterations", type=int, default=200)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--params", type=int, default=20_000_000)
    parser.add_argument("--no-dist", action="store_true", help="skip the 2-process part")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _manager(model: torch.nn.Module, out: str, handler: bool) -> ExtensionsManager:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    manager = ExtensionsManager(model, optimizer, 10**9, iters_per_epoch=10**6, out_dir=out)
    manager.extend(ExtensionEntry(ext.snapshot(), trigger=(10**8, "iteration")))
    if handler:
        manager.extend(ext.PreemptionHandler())
    return manager


def _median_difference(
    run: Callable[[bool], float], rounds: int
) -> tuple[float, float, list[float]]:
    """Interleave ``run(False)`` and ``run(True)`` (seconds per iteration) in alternating
    order; return their medians and the baseline's per-round figures."""
    without, with_handler, differences = [], [], []
    for round_ in range(rounds + 1):
        order = (False, True) if round_ % 2 else (True, False)
        times = {flag: run(flag) for flag in order}
        if round_ == 0:
            continue  # warm-up
        without.append(times[False])
        with_handler.append(times[True])
        differences.append(times[True] - times[False])
    return statistics.median(without), statistics.median(differences), without


def empty_iterations(args: argparse.Namespace) -> None:
    model = torch.nn.Linear(2, 1)
    managers = {}
    with tempfile.TemporaryDirectory() as out:
        for flag in (False, True):
            managers[flag] = _manager(model, os.path.join(out, str(flag)), flag)
            assert not managers[flag].stop_trigger  # starts the extensions

        def run(flag: bool) -> float:
            manager = managers[flag]
            start = time.perf_counter()
            for _ in range(args.iterations):
                with manager.run_iteration():
                    pass
            return (time.perf_counter() - start) / args.iterations

        base, difference, _ = _median_difference(run, args.rounds)
    print(
        f"1. empty run_iteration(), one process: {base * 1e6:.2f} us without the handler; "
        f"the handler adds {difference * 1e6:.3f} us per iteration (target: <= 1 us)"
    )


def _dist_worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
    x = torch.randn(32, args.width)
    with tempfile.TemporaryDirectory() as out:
        managers = {flag: _manager(model, os.path.join(out, str(flag)), flag) for flag in (0, 1)}
        for manager in managers.values():
            assert not manager.stop_trigger

        def run(flag: bool) -> float:
            manager = managers[int(flag)]
            optimizer = manager.optimizers["main"]
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.dist_iterations):
                with manager.run_iteration():
                    optimizer.zero_grad()
                    model(x).square().mean().backward()
                    optimizer.step()
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            return float(elapsed.item()) / args.dist_iterations

        base, difference, rounds = _median_difference(run, args.rounds)
        for manager in managers.values():
            manager.finalize()
    if rank == 0:
        low, _, high = statistics.quantiles(rounds, n=4)
        print(
            f"2. DDP MLP ({args.width} wide), 2 gloo ranks: {base * 1e3:.3f} ms per iteration "
            f"without the handler (rounds' quartiles {low * 1e3:.3f}-{high * 1e3:.3f} ms); "
            f"the handler adds {difference * 1e6:.1f} us ({difference / base:+.1%})"
        )
    dist.destroy_process_group()


def preemption_time(args: argparse.Namespace) -> None:
    width = max(64, int((args.params / 4) ** 0.5))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(4)))
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(8, width)
    with tempfile.TemporaryDirectory() as out:
        manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=10**6, out_dir=out)
        manager.extend(ExtensionEntry(ext.snapshot(), trigger=(10**8, "iteration")))
        manager.extend(ext.PreemptionHandler())
        stepped = 0.0
        while not manager.stop_trigger:
            with manager.run_iteration():
                if manager.iteration == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
                optimizer.zero_grad()
                model(x).square().mean().backward()
                optimizer.step()
                stepped = time.perf_counter()
        elapsed = time.perf_counter() - stepped
        size = sum(os.path.getsize(os.path.join(out, name)) for name in os.listdir(out))
    print(
        f"3. preemption of a {params / 1e6:.0f}M-parameter model with Adam, one process: "
        f"{elapsed:.2f} s from the signal's iteration to the end of the loop "
        f"({size / 1e6:.0f} MB snapshot, DEFAULT, local disk)"
    )


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.worker:
        _dist_worker(args)
        return
    empty_iterations(args)
    if not args.no_dist:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            __file__,
            "--worker",
            *(argv if argv is not None else sys.argv[1:]),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"the 2-process part failed:\n{done.stderr[-4000:]}")
        print(done.stdout.strip())
    preemption_time(args)


if __name__ == "__main__":
    main()
