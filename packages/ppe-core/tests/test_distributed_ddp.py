"""DistributedDataParallel at scale: 2 and 4 gloo ranks started by torchrun.

The module is also the worker (``python -m torch.distributed.run --standalone
--nproc-per-node N test_distributed_ddp.py OUT_DIR``): each rank runs the scenarios below on a
model large enough for several gradient buckets (so that buckets are all-reduced while
backward still runs) and saves its results to ``OUT_DIR/rank<r>.pt``; the tests compare them
with single-process references computed here from the same seeds and data.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pytorch_pfn_extras.nn.parallel import DistributedDataParallel
from pytorch_pfn_extras.nn.parallel.distributed import get_foreach_wrapper

GLOBAL_BATCH = 8
STEPS = 3
LR = 0.05

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)


# ---------------------------------------------------------------- shared by worker and tests


class Net(torch.nn.Module):
    """About 1.3 MB of float32 parameters (two buckets), a branch per rank parity, an
    unused head, and a BatchNorm."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.inp = torch.nn.Linear(16, 512)
        self.hidden = torch.nn.Linear(512, 512)
        self.even = torch.nn.Linear(512, 4)
        self.odd = torch.nn.Linear(512, 4)
        self.unused = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor, branch: str = "both") -> torch.Tensor:
        h = torch.tanh(self.hidden(torch.tanh(self.inp(x))))
        if branch == "even":
            out = self.even(h)
        elif branch == "odd":
            out = self.odd(h)
        else:
            out = self.even(h) + self.odd(h)
        # The BatchNorm updates its running statistics (buffers); its input is detached so
        # that it does not cancel the gradient of the biases before it.
        return out + 0.1 * self.norm(out.detach())


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    return [
        (
            torch.randn(GLOBAL_BATCH, 16, generator=generator),
            torch.randn(GLOBAL_BATCH, 4, generator=generator),
        )
        for _ in range(STEPS)
    ]


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    return tensor.chunk(world_size)[rank]


def branch_of(rank: int) -> str:
    return "even" if rank % 2 == 0 else "odd"


def grads(module: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.clone() for n, p in module.named_parameters()}


def params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def sgd(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p -= LR * p.grad


# ------------------------------------------------------------------------------ the worker


def _train(rank: int, world_size: int, **options: Any) -> dict[str, Any]:
    net = Net()
    ddp = DistributedDataParallel(net, **options)
    for x, y in batches():
        ddp.zero_grad()
        F.mse_loss(ddp(shard(x, rank, world_size)), shard(y, rank, world_size)).backward()
        sgd(net)
    return params(net)


def run(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    x, y = batches()[0]
    x_local, y_local = shard(x, rank, world_size), shard(y, rank, world_size)

    # Training over several buckets equals one process on the full batches.
    results["trained"] = _train(rank, world_size)

    # A graph that differs between ranks: each rank uses its parity's branch.
    net = Net()
    ddp = DistributedDataParallel(net)
    F.mse_loss(ddp(x_local, branch_of(rank)), y_local).backward()
    results["dynamic"] = grads(net)

    # negotiate_grads=False: a parameter without gradient is an error naming it.
    ddp = DistributedDataParallel(Net(), negotiate_grads=False)
    try:
        F.mse_loss(ddp(x_local), y_local).backward()
    except RuntimeError as error:
        results["unused_error"] = str(error)
    # ... unless it does not require a gradient; and freezing after construction counts.
    net = Net()
    ddp = DistributedDataParallel(net, negotiate_grads=False)
    net.unused.requires_grad_(False)
    F.mse_loss(ddp(x_local), y_local).backward()
    net.zero_grad(set_to_none=True)
    net.inp.requires_grad_(False)
    F.mse_loss(ddp(x_local), y_local).backward()
    results["frozen"] = grads(net)

    # no_sync: two local backward passes, then one synchronized.
    net = Net()
    ddp = DistributedDataParallel(net)
    with ddp.no_sync():
        F.mse_loss(ddp(x_local), y_local).backward()
    results["no_sync_local"] = grads(net)
    F.mse_loss(ddp(x_local), y_local).backward()
    results["no_sync_synced"] = grads(net)

    # Buffers: rank 0's running statistics reach every rank unless disabled.
    for flag in (True, False):
        net = Net()
        net.norm.running_mean.fill_(float(rank))
        ddp = DistributedDataParallel(net, broadcast_buffers=flag)
        ddp(x_local).sum().backward()
        results[f"buffers_{flag}"] = net.norm.running_mean.clone()

    # A comm hook sees (and here scales) the local gradients before the reduction.
    net = Net()
    ddp = DistributedDataParallel(net)
    seen: list[bool] = []

    def scale(module: DistributedDataParallel) -> None:
        seen.append(module is ddp)
        for p in module.parameters():
            if p.grad is not None:
                p.grad.mul_(rank + 1)

    ddp.register_comm_hook(scale)
    F.mse_loss(ddp(x_local), y_local).backward()
    results["hooked"] = grads(net)
    results["hook_calls"] = seen

    # Custom collectives: a sum then a foreach scaling, and a broadcast from the last rank.
    def mean_by_foreach(tensors: Sequence[torch.Tensor], group: Any) -> None:
        for tensor in tensors:
            dist.all_reduce(tensor, group=group)
        get_foreach_wrapper().multiply(tensors, 1 / dist.get_world_size(group))

    def broadcast_from_last(tensors: Sequence[torch.Tensor], group: Any) -> None:
        for tensor in tensors:
            dist.broadcast(tensor, src=dist.get_world_size(group) - 1, group=group)

    net = Net(seed=rank)
    ddp = DistributedDataParallel(
        net, reduce_function=mean_by_foreach, broadcast_function=broadcast_from_last
    )
    results["custom_params"] = params(net)
    F.mse_loss(ddp(x_local, branch_of(rank)), y_local).backward()
    results["custom_grads"] = grads(net)
    return results


def worker(out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    try:
        results = run(rank, dist.get_world_size())
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


# ------------------------------------------------------------------------------ the tests


@pytest.fixture(
    scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=lambda n: f"{n}ranks"
)
def ranks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    world_size: int = request.param
    out = tmp_path_factory.mktemp(f"ddp{world_size}")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(world_size),
        __file__,
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _close(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(actual) == list(expected)
    for name in expected:
        if expected[name] is None:
            assert actual[name] is None, name
        else:
            torch.testing.assert_close(
                actual[name],
                expected[name],
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m, n=name: f"{n}: {m}",
            )


def _local_grads(rank: int, world_size: int, branch: str = "both", seed: int = 0) -> dict[str, Any]:
    x, y = batches()[0]
    net = Net(seed)
    F.mse_loss(net(shard(x, rank, world_size), branch), shard(y, rank, world_size)).backward()
    return grads(net)


def _mean(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The average over the ranks, a missing gradient counting as zero; None if none has it."""
    out: dict[str, Any] = {}
    for name in per_rank[0]:
        present = [g[name] for g in per_rank if g[name] is not None]
        out[name] = None if not present else sum(present) / len(per_rank)
    return out


def test_training_over_several_buckets_equals_one_process_on_the_full_batches(
    ranks: list[dict[str, Any]],
) -> None:
    net = Net()
    for x, y in batches():
        net.zero_grad()
        # The mean of the ranks' mean losses: BatchNorm normalizes each rank's shard.
        world_size = len(ranks)
        loss = sum(
            F.mse_loss(net(shard(x, r, world_size)), shard(y, r, world_size))
            for r in range(world_size)
        )
        (loss / world_size).backward()
        sgd(net)
    for result in ranks:
        _close(result["trained"], params(net))


def test_a_parameter_some_ranks_did_not_use_gets_the_average_with_zeros(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    expected = _mean([_local_grads(r, world_size, branch_of(r)) for r in range(world_size)])
    assert expected["unused.weight"] is None  # no rank used it: it keeps no gradient
    for result in ranks:
        _close(result["dynamic"], expected)


def test_without_negotiation_a_parameter_without_gradient_is_an_error_naming_it(
    ranks: list[dict[str, Any]],
) -> None:
    for result in ranks:
        message = result["unused_error"]
        assert "negotiate_grads=False" in message
        assert "['unused.weight', 'unused.bias']" in message
        assert "pass negotiate_grads=True" in message


def test_parameters_frozen_after_construction_are_left_out(ranks: list[dict[str, Any]]) -> None:
    world_size = len(ranks)
    expected = _mean([_local_grads(r, world_size) for r in range(world_size)])
    expected.update(
        {"inp.weight": None, "inp.bias": None, "unused.weight": None, "unused.bias": None}
    )
    for result in ranks:
        _close(result["frozen"], expected)


def test_no_sync_accumulates_locally_and_the_next_backward_averages_the_sum(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    local = [_local_grads(r, world_size) for r in range(world_size)]
    doubled = _mean(
        [{n: None if g is None else 2 * g for n, g in grads.items()} for grads in local]
    )
    for rank, result in enumerate(ranks):
        _close(result["no_sync_local"], local[rank])
        _close(result["no_sync_synced"], doubled)


def test_buffers_are_rank_zeros_only_when_broadcast(ranks: list[dict[str, Any]]) -> None:
    first = ranks[0]["buffers_True"]
    for rank, result in enumerate(ranks):
        torch.testing.assert_close(result["buffers_True"], first)
        if rank:
            assert not torch.allclose(result["buffers_False"], ranks[0]["buffers_False"])


def test_a_comm_hook_changes_the_local_gradients_before_the_reduction(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    scaled = [
        {n: None if g is None else (r + 1) * g for n, g in _local_grads(r, world_size).items()}
        for r in range(world_size)
    ]
    for result in ranks:
        assert result["hook_calls"] == [True]
        _close(result["hooked"], _mean(scaled))


def test_custom_reduce_and_broadcast_functions_replace_the_defaults(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    last = world_size - 1
    for result in ranks:
        _close(result["custom_params"], params(Net(seed=last)))  # broadcast from the last rank
    # The ranks agreed on which parameters got a gradient (zeros elsewhere) before the
    # custom reduction, which averaged them.
    expected = _mean(
        [_local_grads(r, world_size, branch_of(r), seed=last) for r in range(world_size)]
    )
    for result in ranks:
        _close(result["custom_grads"], expected)


if __name__ == "__main__":
    worker(sys.argv[1])
