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
   write completed. The CPU copy that every asynchronous save reuses is allocated in the
   background after the first optimizer step the extension sees, while training goes on
   (two training steps here, as a run has before its first snapshot): the first save's
   blocked time and the resident memory the copy keeps are printed apart.

Printed per N: the times, the peak resident memory that each save adds over the training
state (the sum over the ranks, from ``VmHWM`` reset before each save), and the ratios:
sharded / baseline (target below 1) and async blocked / synchronous sharded (target below
0.1). Files go to a temporary directory (``--dir``), removed at the end.

With ``--device cuda`` the model, its optimizer state and the batches live on the GPUs (one
rank per GPU, NCCL for the model's collectives and gloo for the benchmark's own): the saves copy
the state from the device (the asynchronous one into pinned memory it keeps), and the timings
of the synchronous saves and of the training steps include waiting for the device. On one GPU:
``--device cuda --ranks 1``.

With ``--s3`` (needs ``moto[server]``, pfio and s3fs), the parent process also starts a local
S3 server (moto, on 127.0.0.1, in a thread of that process) with a bucket, and after the
repeats above each N measures, ``--repeats`` times (the median counts), two saves to it through
a pfio file system (``pfio.v2.from_url("s3://BUCKET", endpoint=...)``): the synchronous
``snapshot(snapshot_mode=SnapshotMode.SHARDED)`` of a manager whose writer writes there (every
rank's shards through torch.distributed.checkpoint's fsspec writer, then the commit, which on
object storage copies the objects to their final names; the time until every rank is done), and
the baseline: rank 0 gathers the full state as above and ``torch.save``-s it into
``fs.open(key, "wb")`` (a multipart upload, complete when the file is closed). One more line
per N prints both times and their ratio. The network and the server are this machine's
(loopback, and moto sharing the cores with the ranks): the figures compare the two ways of
saving, not a real object store's throughput. The bucket's objects are deleted after each save.

Usage: ``python benchmarks/sharded_snapshot.py [--ranks 2 4] [--width 4096] [--layers 6]
[--repeats 3] [--dir DIR] [--device cpu] [--s3]``; scale down with ``--width 1024`` on a small
machine.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import logging
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

# How the parent passes the local S3 server to the workers (``--s3``).
_S3_ENDPOINT = "PPE_BENCH_S3_ENDPOINT"
_S3_BUCKET = "PPE_BENCH_S3_BUCKET"
_S3_MODULES = ("moto", "flask", "boto3", "pfio", "s3fs")
# moto accepts any credentials; these replace the environment's for the workers.
_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Settings of the environment that would send the clients elsewhere.
_S3_UNSET = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL")


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
    parser.add_argument(
        "--s3",
        action="store_true",
        help="also save to a local S3 server (moto on 127.0.0.1) through pfio",
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


def _full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The baseline's state: the full model and optimizer state gathered on the CPU (a
    collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "models": {"main": get_model_state_dict(model, options=options)},
        "optimizers": {"main": get_optimizer_state_dict(model, optimizer, options=options)},
    }


def _worker(args: argparse.Namespace) -> None:
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
        state = _full_state(model, optimizer)
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

    # The asynchronous snapshot allocates the CPU copy it keeps for every save after the
    # first optimizer step of the run, in the background, while training goes on: two
    # training steps (a run has them, and more, before its first snapshot).
    rss = _rss_kib("VmRSS")
    train_step()
    train_step()
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
    if os.environ.get(_S3_ENDPOINT):
        prefix = os.path.basename(out)
        results.update(_measure_s3(model, optimizer, prefix, args.repeats, device))
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


def _measure_s3(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    prefix: str,
    repeats: int,
    device: torch.device,
) -> dict[str, list[float]]:
    """The sharded save and the rank-0 save to the parent's S3 server, ``repeats`` times each:
    ``{"s3_sharded_s": [...], "s3_baseline_s": [...]}`` (the slowest rank's seconds)."""
    import boto3  # type: ignore[import-untyped]
    import pfio  # type: ignore[import-untyped]

    from pytorch_pfn_extras import writing
    from pytorch_pfn_extras.training import ExtensionsManager
    from pytorch_pfn_extras.training import extensions as ext

    endpoint, bucket = os.environ[_S3_ENDPOINT], os.environ[_S3_BUCKET]
    rank = dist.get_rank()
    fs = pfio.v2.from_url(f"s3://{bucket}", endpoint=endpoint)
    client = boto3.client("s3", endpoint_url=endpoint)
    manager = ExtensionsManager(
        model,
        optimizer,
        1,
        iters_per_epoch=1,
        out_dir=prefix,
        writer=writing.SimpleWriter(fs=fs),
    )
    sync = ext.snapshot(snapshot_mode=ext.SnapshotMode.SHARDED, filename="sync_{.iteration}")
    manager.extend(sync, trigger=(10**9, "iteration"))
    manager.start_extensions()

    def baseline() -> None:
        state = _full_state(model, optimizer)
        if rank == 0:
            with fs.open(f"{prefix}/full.pt", "wb") as f:
                torch.save(state, f)

    def empty_bucket() -> None:
        dist.barrier()
        if rank == 0:
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/"):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        dist.barrier()

    results: dict[str, list[float]] = {"s3_sharded_s": [], "s3_baseline_s": []}
    for repeat in range(repeats):
        manager.iteration = repeat
        seconds, _ = _measure(lambda: sync(manager), device)
        results["s3_sharded_s"].append(seconds)
        empty_bucket()
        seconds, _ = _measure(baseline, device)
        results["s3_baseline_s"].append(seconds)
        empty_bucket()
    manager.finalize()
    return results


def _start_s3() -> tuple[Any, dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with an empty bucket, and the workers' environment."""
    missing = [name for name in _S3_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(
            f"--s3 needs moto[server], pfio and s3fs ({', '.join(missing)} missing): "
            "pip install 'ppe-training[s3]' 'moto[server]'"
        )
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # it logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint, bucket = f"http://{host}:{port}", "ppe-bench"
    env = {k: v for k, v in os.environ.items() if k not in _S3_UNSET}
    env.update(_S3_CREDENTIALS)
    env.update({_S3_ENDPOINT: endpoint, _S3_BUCKET: bucket})
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=_S3_CREDENTIALS["AWS_DEFAULT_REGION"],
        aws_access_key_id=_S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=bucket)
    return server, env


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
    server, env = _start_s3() if args.s3 else (None, None)
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
            process = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
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
                f"    the first async save (its CPU copy allocated after the first step): "
                f"blocked {r['first_blocked_s']:.3f} s, the copy +{r['copy_mib']:.0f} MiB "
                "resident (all ranks)\n"
                f"  ratio sharded / rank-0 save:   {r['sharded_s'] / r['baseline_s']:.2f}\n"
                f"  ratio blocked / sync sharded:  {r['blocked_s'] / r['sharded_s']:.3f} "
                "(target < 0.1)"
            )
            if server is not None:
                print(
                    "  S3 (local moto server on 127.0.0.1, through pfio): sharded snapshot "
                    f"{r['s3_sharded_s']:.2f} s, rank 0 gathers + saves "
                    f"{r['s3_baseline_s']:.2f} s, ratio sharded / rank-0 save "
                    f"{r['s3_sharded_s'] / r['s3_baseline_s']:.2f}"
                )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
