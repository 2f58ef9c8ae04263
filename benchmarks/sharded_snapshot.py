"""Sharded snapshot time and memory on 2 and 4 ranks, against rank 0 saving everything.

A ``--layers`` x ``Linear(--width, --width)`` model (about ``layers * width**2`` parameters;
100M by default: 6 x 4096) is sharded with FSDP2 ``fully_shard`` (per layer and at the root)
on N gloo ranks of one machine (``python -m torch.distributed.run --nproc-per-node N``), and
trained one step with Adam so that the optimizer holds its state (3x the parameters in all).
Then, each ``--repeats`` times (the median counts), for each N of ``--ranks``:

1. ``snapshot(snapshot_mode=SnapshotMode.SHARDED)`` of its ``ExtensionsManager``: every rank
   writes its shards through torch.distributed.checkpoint (fsync'd), the directory is
   committed; the time until every rank is done.
2. The baseline: rank 0 gathers the full model and optimizer state
   (``get_model_state_dict``/``get_optimizer_state_dict`` with ``full_state_dict=True,
   cpu_offload=True``) and ``torch.save``-s them into one file (fsync'd).
3. ``snapshot(..., async_save=True)``: the time the training loop is blocked (the
   extension's call: the parameters are copied in memory, the optimizer's state is copied
   by a background thread, the write goes on in the background), then one training step
   with the save in flight (its ``optimizer.step()`` waits for the optimizer state's copy;
   on this CPU-only benchmark the copy and the writer's threads also compete with the step
   for the cores), printed next to a step with nothing in flight, and the time until the
   write completed. A first asynchronous save, before the repeats, allocates the CPU copy
   that the next ones reuse: its blocked time and the resident memory the copy keeps are
   printed apart.

Printed per N: the times, the peak resident memory that each save adds over the training
state (the sum over the ranks, from ``VmHWM`` reset before each save), and the ratios:
sharded / baseline (target below 1) and async blocked / synchronous sharded (target below
0.1). Files go to a temporary directory (``--dir``), removed at the end.

With ``--device cuda`` the model, its optimizer state and the batches live on the GPUs (one
rank per GPU, NCCL for the model's collectives and gloo for the benchmark's own): the saves copy
the state from the device (the asynchronous one into pinned memory it keeps), and the timings
of the synchronous saves and of the training steps include waiting for the device. On one GPU:
``--device cuda --ranks 1``.

Usage: ``python benchmarks/sharded_snapshot.py [--ranks 2 4] [--width 4096] [--layers 6]
[--repeats 3] [--dir DIR] [--device cpu]``; scale down with ``--width 1024`` on a small machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="", help="where snapshots are written (a temp dir)")
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where the model is trained"
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def _measure(action: Callable[[], Any], device: torch.device | None = None) -> tuple[float, float]:
    """``(seconds until every rank finished, MiB this rank's peak RSS rose)``; with a CUDA
    ``device``, until the device finished the work ``action`` queued too."""
    dist.barrier()
    _reset_peak()
    before = _rss_kib("VmRSS")
    start = time.perf_counter()
    action()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    peak = _rss_kib("VmHWM") - before
    dist.barrier()
    values = torch.tensor([elapsed, 0.0], dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return float(values[0]), peak / 1024


def _worker(args: argparse.Namespace) -> None:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from pytorch_pfn_extras.training import ExtensionsManager
    from pytorch_pfn_extras.training import extensions as ext

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=600)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("cpu:gloo,cuda:nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Linear(args.width, args.width, device=device) for _ in range(args.layers)]
    )
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def train_step() -> None:
        model(torch.randn(2, args.width, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    train_step()
    parameters = sum(p.numel() for p in model.parameters())

    out = args.worker
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=1, out_dir=out)
    sync = ext.snapshot(snapshot_mode=ext.SnapshotMode.SHARDED, filename="sync_{.iteration}")
    background = ext.snapshot(
        snapshot_mode=ext.SnapshotMode.SHARDED, filename="async_{.iteration}", async_save=True
    )
    manager.extend(sync, trigger=(10**9, "iteration"))
    manager.extend(background, trigger=(10**9, "iteration"))
    manager.start_extensions()

    def baseline() -> None:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = {
            "models": {"main": get_model_state_dict(model, options=options)},
            "optimizers": {"main": get_optimizer_state_dict(model, optimizer, options=options)},
        }
        if rank == 0:
            path = os.path.join(out, "full.pt")
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.remove(path)

    results: dict[str, list[float]] = {}

    def record(key: str, value: float) -> None:
        results.setdefault(key, []).append(value)

    # The first asynchronous save allocates the CPU copy it keeps for the next ones.
    rss = _rss_kib("VmRSS")
    manager.iteration = args.repeats
    first_blocked, _ = _measure(lambda: background(manager))
    _measure(background.wait)  # type: ignore[attr-defined]
    copy_mib = (_rss_kib("VmRSS") - rss) / 1024
    dist.barrier()
    if rank == 0:
        shutil.rmtree(os.path.join(out, f"async_{args.repeats}"), ignore_errors=True)
    for repeat in range(args.repeats):
        manager.iteration = repeat
        seconds, peak = _measure(lambda: sync(manager), device)
        record("sharded_s", seconds)
        record("sharded_mib", peak)
        shutil.rmtree(os.path.join(out, f"sync_{repeat}"), ignore_errors=True)
        seconds, peak = _measure(baseline, device)
        record("baseline_s", seconds)
        record("baseline_mib", peak)
        step, _ = _measure(train_step, device)
        record("step_s", step)
        seconds, peak = _measure(lambda: background(manager))
        record("blocked_s", seconds)
        record("async_mib", peak)
        step, _ = _measure(train_step, device)
        record("step_after_s", step)
        done, _ = _measure(background.wait)  # type: ignore[attr-defined]
        record("async_total_s", seconds + step + done)
        dist.barrier()
        if rank == 0:
            shutil.rmtree(os.path.join(out, f"async_{repeat}"), ignore_errors=True)
    # Peaks are per rank: sum them; times are the slowest rank's already.
    summary = {key: statistics.median(values) for key, values in results.items()}
    summary["copy_mib"] = copy_mib
    for key in ("sharded_mib", "baseline_mib", "async_mib", "copy_mib"):
        total = torch.tensor([summary[key]], dtype=torch.float64)
        dist.all_reduce(total)
        summary[key] = float(total.item())
    if rank == 0:
        summary["parameters"] = parameters
        summary["first_blocked_s"] = first_blocked
        summary["blocked_all"] = results["blocked_s"]
        print("RESULT " + json.dumps(summary), flush=True)
    manager.finalize()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.worker:
        _worker(args)
        return
    if args.device == "cuda" and max(args.ranks) > torch.cuda.device_count():
        message = (
            f"--device cuda runs one rank per GPU: --ranks {max(args.ranks)} needs "
            f"{max(args.ranks)} GPUs, this machine has {torch.cuda.device_count()}"
        )
        raise SystemExit(message)
    base = args.dir or tempfile.mkdtemp(prefix="ppe-sharded-bench-")
    print(
        f"FSDP2 model of {args.layers} x Linear({args.width}, {args.width}) with Adam on "
        f"{args.device}, median of {args.repeats}; snapshots in {base}"
    )
    try:
        for ranks in args.ranks:
            out = os.path.join(base, f"ranks{ranks}")
            os.makedirs(out, exist_ok=True)
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                str(ranks),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(_free_port()),
                __file__,
                "--worker",
                out,
                "--width",
                str(args.width),
                "--layers",
                str(args.layers),
                "--repeats",
                str(args.repeats),
                "--device",
                args.device,
            ]
            process = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
            if process.returncode != 0 or not lines:
                print(process.stdout[-3000:], process.stderr[-5000:], file=sys.stderr)
                raise SystemExit(f"the {ranks}-rank run failed ({process.returncode})")
            r = json.loads(lines[0].removeprefix("RESULT "))
            print(
                f"\n{ranks} ranks, {r['parameters'] / 1e6:.1f}M parameters "
                f"({r['parameters'] * 12 / 2**30:.2f} GiB with Adam's state):\n"
                f"  sharded snapshot        {r['sharded_s']:7.2f} s   "
                f"peak +{r['sharded_mib']:7.0f} MiB (all ranks)\n"
                f"  rank 0 gathers + saves  {r['baseline_s']:7.2f} s   "
                f"peak +{r['baseline_mib']:7.0f} MiB\n"
                f"  async_save: loop blocked {r['blocked_s']:6.3f} s, written after "
                f"{r['async_total_s']:.2f} s   peak +{r['async_mib']:7.0f} MiB "
                f"(blocked each time: {', '.join(f'{b:.3f}' for b in r['blocked_all'])})\n"
                f"    the next training step, the save in flight: {r['step_after_s']:.3f} s "
                f"(without: {r['step_s']:.3f} s)\n"
                f"    the first async save allocates the CPU copy it keeps: blocked "
                f"{r['first_blocked_s']:.3f} s, +{r['copy_mib']:.0f} MiB resident (all ranks)\n"
                f"  ratio sharded / rank-0 save:   {r['sharded_s'] / r['baseline_s']:.2f}\n"
                f"  ratio blocked / sync sharded:  {r['blocked_s'] / r['sharded_s']:.3f} "
                "(target < 0.1)"
            )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
