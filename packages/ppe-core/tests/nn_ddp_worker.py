"""One rank of the DistributedDataParallel scenarios checked by ``test_nn_parallel.py``.

Run as ``python nn_ddp_worker.py RANK WORLD_SIZE PORT OUT_DIR``. Every scenario's results
are saved to ``OUT_DIR/rank{RANK}.pt`` for the test process to compare with
single-process references built from the same seeds and data (the test loads this file
for ``make_model``, ``batch`` ...).
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras.nn.parallel import DistributedDataParallel


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


class TwoBranch(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.a = torch.nn.Linear(4, 2)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, use_a: bool) -> torch.Tensor:
        return self.a(x) if use_a else self.b(x)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(123)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 2, generator=generator)


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    return tensor.chunk(world_size)[rank]


def sgd_step(module: torch.nn.Module, lr: float) -> None:
    # Plain SGD by hand: constructing a torch.optim optimizer imports torch._dynamo,
    # which would dominate the start-up time of the worker processes.
    with torch.no_grad():
        for param in module.parameters():
            if param.grad is not None:
                param -= lr * param.grad


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, target)


def _grads(module: torch.nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in module.parameters()]


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def run(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    x, y = batch()
    x_local, y_local = shard(x, rank, world_size), shard(y, rank, world_size)

    # Parameters of rank 0 reach every rank at construction.
    model = make_model(seed=rank)
    ddp = DistributedDataParallel(model)
    results["params_after_construction"] = _params(model)

    # One backward on the local half: grads become those of the full batch.
    loss_fn(ddp(x_local), y_local).backward()
    results["grads"] = _grads(model)

    # A few SGD steps train exactly like one process on the full batch.
    for _ in range(3):
        ddp.zero_grad()
        loss_fn(ddp(x_local), y_local).backward()
        sgd_step(ddp, lr=0.1)
    results["params_after_training"] = _params(model)

    # no_sync: local accumulation, then one synchronized backward.
    model = make_model(seed=0)
    ddp = DistributedDataParallel(model)
    (x_a, x_b), (y_a, y_b) = x_local.chunk(2), y_local.chunk(2)
    with ddp.no_sync():
        loss_fn(ddp(x_a), y_a).backward()
    results["no_sync_local_grads"] = _grads(model)
    loss_fn(ddp(x_b), y_b).backward()
    results["no_sync_final_grads"] = _grads(model)

    # A dynamic graph: each rank uses a different branch.
    branches = TwoBranch(seed=0)
    ddp = DistributedDataParallel(branches)
    loss_fn(ddp(x_local, use_a=rank == 0), y_local).backward()
    results["negotiated_grads"] = _grads(branches)

    # Custom collectives on a custom process group.
    group = dist.new_group(list(range(world_size)))
    calls: list[tuple[str, int, bool]] = []

    def broadcast_nothing(tensors: Any, process_group: Any) -> None:
        calls.append(("broadcast", len(tensors), process_group is group))

    def all_reduce_sum(tensors: Any, process_group: Any) -> None:
        calls.append(("reduce", len(tensors), process_group is group))
        for tensor in tensors:
            dist.all_reduce(tensor, group=process_group)

    model = make_model(seed=rank)
    ddp = DistributedDataParallel(
        model,
        process_group=group,
        broadcast_buffers=False,
        reduce_function=all_reduce_sum,
        broadcast_function=broadcast_nothing,
    )
    results["custom_params"] = _params(model)
    loss_fn(ddp(x_local), y_local).backward()
    results["custom_grads"] = _grads(model)
    results["custom_calls"] = calls

    # Buffers: broadcast at construction and after backward, unless disabled.
    for flag in (True, False):
        torch.manual_seed(rank)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        model[1].running_mean.fill_(float(rank + 1))
        ddp = DistributedDataParallel(model, broadcast_buffers=flag)
        results[f"buffers_{flag}_construction"] = model[1].running_mean.clone()
        ddp(x_local).sum().backward()
        results[f"buffers_{flag}_backward"] = model[1].running_mean.clone()

    # Sparse gradients are refused by the default reduction with a clear error.
    embedding = torch.nn.Embedding(5, 2, sparse=True)
    ddp = DistributedDataParallel(embedding)
    try:
        ddp(torch.tensor([rank, 3])).sum().backward()
    except ValueError as error:
        results["sparse_error"] = str(error)
    return results


def main() -> None:
    rank, world_size, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        results = run(rank, world_size)
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
