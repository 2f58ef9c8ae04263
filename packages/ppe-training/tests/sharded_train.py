"""One rank of the sharded snapshot tests (started by torch.distributed.run, or alone).

``python sharded_train.py OUT_DIR [options]`` trains a tiny MLP with Adam, a StepLR state
object and LogReport for ``--epochs`` epochs of 4 iterations, with
``snapshot(snapshot_mode=--mode, autoload=True)`` every 2 iterations. The global batch of 4
rows depends only on the iteration and is split between the ranks, whose gradients are
averaged (by FSDP2, DDP, or by hand for a plain model), so every world size dividing 4 trains
the same weights. ``--stop-at N`` ends the run after iteration N (a preempted job); with
``--write-ppe09`` the run takes no snapshot but writes, at that point, what PPE 0.9's
``--mode`` would have written (DISTRIBUTED: rank 0's ``manager.state_dict()`` as the file
``snapshot_iter_N``; SHARDED: each rank's as ``snapshot_iter_N/<rank>``, then an empty
``complete``), laid out from 0.9's description with ``torch.save``. Rank 0
writes ``--result`` (the full weights, the iteration and LogReport's log) with torch.save.
Started without torch.distributed.run it runs in one process without a process group.
With ``--preempt`` a ``PreemptionHandler`` is extended, and ``--signal-at N`` makes rank
``--signal-rank`` send ``--signal`` to itself (or, ``--signal-to parent``, to the torchrun
agent: its parent, or ``PPE_TEST_AGENT_PID``) during iteration N: a preempted job.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module

ROWS = 4
ITERS_PER_EPOCH = 4


class RankNote:
    """A state object that differs per rank (what a DistributedSampler loader's state does)."""

    def __init__(self, rank: int) -> None:
        self.state = {"rank": rank, "steps": 0}

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = dict(state)


def batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + iteration)
    x = torch.randn(ROWS, 4, generator=generator)
    return x, x.sum(1, keepdim=True).repeat(1, 4) * 0.5


def build_model(kind: str, world: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(model given to the manager, the module whose full weights are compared)``."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(net[0])
        fully_shard(net[2])
        fully_shard(net)
        return net, net
    if kind == "ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        return ddp, net
    return net, net


def full_weights(kind: str, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    if kind == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=options)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", choices=["fsdp", "ddp", "plain"], default="plain")
    parser.add_argument("--mode", choices=["SHARDED", "DISTRIBUTED", "DEFAULT"], default="SHARDED")
    parser.add_argument(
        "--s3", default="", help="CLIENT:ENDPOINT (pfio or s3fs): OUT_DIR is on that S3 server"
    )
    parser.add_argument("--write-ppe09", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--stop-at", type=int, default=0)
    parser.add_argument("--result", default="")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--async-save", action="store_true")
    parser.add_argument("--n-retains", type=int, default=-1)
    parser.add_argument("--kill-rank", type=int, default=-1, help="SIGKILL this rank ...")
    parser.add_argument("--kill-at", type=int, default=0, help="... writing this snapshot")
    parser.add_argument("--skip-rank", type=int, default=-1, help="this rank skips snapshots")
    parser.add_argument("--preempt", action="store_true", help="extend a PreemptionHandler")
    parser.add_argument("--requeue", action="store_true", help="... with requeue=True")
    parser.add_argument("--signal-at", type=int, default=0, help="send a signal in this iteration")
    parser.add_argument("--signal-rank", type=int, default=0, help="... from this rank")
    parser.add_argument(
        "--signal-to", choices=["self", "parent"], default="self", help="... to it or its parent"
    )
    parser.add_argument("--signal", default="SIGTERM", help="... this signal")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of each iteration")
    parser.add_argument("--check-interval", type=float, default=0.0, help="the handler's")
    args = parser.parse_args(argv)

    distributed = "RANK" in os.environ
    if distributed:
        timeout = datetime.timedelta(seconds=args.timeout)
        dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    model, inner = build_model(args.model if distributed else "plain", world)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    manager = ExtensionsManager(
        model,
        optimizer,
        args.epochs,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=args.out,
        state_objects={"scheduler": scheduler, "note": RankNote(rank)},
        writer=s3_writer(args.s3) if args.s3 else None,
    )
    manager.extend(
        ext_module.LogReport(trigger=(1, "iteration"), filename="log" if rank == 0 else None)
    )
    skip = rank == args.skip_rank
    snapshot = ext_module.snapshot(
        snapshot_mode=ext_module.SnapshotMode[args.mode],
        saver_rank=0 if args.mode == "DEFAULT" and distributed else None,
        autoload=True,
        n_retains=args.n_retains,
        async_save=args.async_save,
        condition=lambda: not skip,
    )
    if not args.write_ppe09:
        manager.extend(snapshot, trigger=(2, "iteration"))
    if rank == args.kill_rank:
        arm_kill(args.kill_at)
    handler = None
    if args.preempt:
        handler = ext_module.PreemptionHandler(
            requeue=args.requeue, check_interval=args.check_interval
        )
        manager.extend(handler)
    signal_at = args.signal_at if rank == args.signal_rank else 0

    local = slice(rank, ROWS, world)
    try:
        while not manager.stop_trigger:
            if args.stop_at and manager.iteration >= args.stop_at:
                manager.finalize()  # a preempted job that ends cleanly
                if args.write_ppe09:
                    write_ppe09(manager, args.out, args.mode, rank)
                break
            x, t = batch(manager.iteration)
            with manager.run_iteration():
                if manager.iteration + 1 == signal_at:
                    agent = int(os.environ.get("PPE_TEST_AGENT_PID", os.getppid()))
                    target = os.getpid() if args.signal_to == "self" else agent
                    os.kill(target, signal.Signals[args.signal])
                    if handler is not None:
                        wait_until_received(handler)
                if args.sleep:
                    time.sleep(args.sleep)
                loss = torch.nn.functional.mse_loss(model(x[local]), t[local])
                optimizer.zero_grad()
                loss.backward()
                if distributed and args.model == "plain":
                    for p in model.parameters():
                        assert p.grad is not None
                        dist.all_reduce(p.grad)
                        p.grad /= world
                optimizer.step()
                scheduler.step()
                manager.state_objects["note"].state["steps"] += 1
                value = loss.detach().clone()
                if distributed:
                    dist.all_reduce(value)
                    value /= world
                reporting.report({"loss": value.item()})
        weights = full_weights(args.model if distributed else "plain", inner)
        if rank == 0 and args.result:
            log = manager.get_extension("LogReport").log
            torch.save(
                {
                    "weights": weights,
                    "iteration": manager.iteration,
                    "log": [(e["iteration"], e["loss"]) for e in log],
                    "lr": optimizer.param_groups[0]["lr"],
                    "resumed_from": snapshot.resumed_from,  # type: ignore[attr-defined]
                    "preempted": handler is not None and handler.preempted,
                    "stop_iteration": None if handler is None else handler.stop_iteration,
                },
                args.result,
            )
        preempted = handler is not None and handler.preempted
        print(f"RANK {rank} DONE {manager.iteration} PREEMPTED {preempted}", flush=True)
    finally:
        if distributed:
            dist.destroy_process_group()


def wait_until_received(handler: Any, timeout: float = 60.0) -> None:
    """Wait in this iteration until this process has the signal: one sent to the torchrun
    agent arrives when the agent forwards it, which on a loaded machine may take longer than
    a few iterations (the stop is due within 2 iterations of when the workers get it)."""
    deadline = time.monotonic() + timeout
    while handler.received is None and time.monotonic() < deadline:
        time.sleep(0.01)


def s3_writer(spec: str) -> Any:
    """A writer to the S3 server of ``spec`` (``pfio:http://...`` or ``s3fs:http://...``):
    OUT_DIR is ``bucket/prefix`` (s3fs) or a prefix of the bucket given in the URL (pfio)."""
    from pytorch_pfn_extras import writing

    client, _, endpoint = spec.partition(":")
    if client == "pfio":
        import pfio

        bucket = os.environ["PPE_TEST_BUCKET"]
        return writing.SimpleWriter(fs=pfio.v2.from_url(f"s3://{bucket}", endpoint=endpoint))
    import s3fs

    return writing.SimpleWriter(fs=s3fs.S3FileSystem(endpoint_url=endpoint))


def write_ppe09(manager: ExtensionsManager, out: str, mode: str, rank: int) -> None:
    """Write the snapshot PPE 0.9 writes in ``mode`` at the manager's iteration."""
    path = os.path.join(out, f"snapshot_iter_{manager.iteration}")
    state = manager.state_dict()
    if mode == "DISTRIBUTED":
        if rank == 0:
            torch.save(state, path)
    else:
        os.makedirs(path, exist_ok=True)
        torch.save(state, os.path.join(path, str(rank)))
        if dist.is_initialized():
            dist.barrier()
        if rank == 0:
            open(os.path.join(path, "complete"), "wb").close()
    if dist.is_initialized():
        dist.barrier()


def arm_kill(at_iteration: int) -> None:
    """SIGKILL this process once it wrote its shard of the snapshot of ``at_iteration``,
    before the snapshot is committed (fault injection into DCP's file writer)."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    original = FileSystemWriter.write_data

    def write_data(self: Any, plan: Any, planner: Any) -> Any:
        future = original(self, plan, planner)
        # A temporary on a local disk, the snapshot's own directory on object storage.
        path = str(self.path).rstrip("/")
        if f"snapshot_iter_{at_iteration}.tmp-" in path or path.endswith(
            f"/snapshot_iter_{at_iteration}"
        ):
            future.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        return future

    FileSystemWriter.write_data = write_data  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
