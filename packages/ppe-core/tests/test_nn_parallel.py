"""DistributedDataParallel with real gloo process groups.

The two-rank scenarios run once in two worker processes (``nn_ddp_worker.py``); each
test compares one of their results with a single-process reference computed here from
the same seeds and data. Argument handling and hooks are checked in this process with a
group of one rank.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist

from pytorch_pfn_extras.nn.parallel import DistributedDataParallel
from pytorch_pfn_extras.nn.parallel.distributed import get_foreach_wrapper

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)

WORKER = Path(__file__).with_name("nn_ddp_worker.py")
WORLD_SIZE = 2


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ppe_core_tests_nn_ddp_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("ddp")
    port = str(_free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(WORLD_SIZE), port, str(out_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        for rank in range(WORLD_SIZE)
    ]
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=120)[0].decode(errors="replace"))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"rank {rank} failed:\n{output}"
    return [torch.load(out_dir / f"rank{rank}.pt") for rank in range(WORLD_SIZE)]


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in module.parameters()]


def _assert_all_close(actual: list[Any], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def _full_batch_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    x, y = worker.batch()
    worker.loss_fn(model(x), y).backward()
    return _grads(model)


def test_parameters_of_rank_zero_are_broadcast_at_construction(
    ranks: list[dict[str, Any]],
) -> None:
    expected = [p.detach() for p in worker.make_model(seed=0).parameters()]
    other = [p.detach() for p in worker.make_model(seed=1).parameters()]
    assert not torch.equal(expected[0], other[0])
    for result in ranks:
        _assert_all_close(result["params_after_construction"], expected)


def test_gradients_equal_a_single_process_run_on_the_full_batch(
    ranks: list[dict[str, Any]],
) -> None:
    expected = _full_batch_grads(worker.make_model(seed=0))
    for result in ranks:
        _assert_all_close(result["grads"], expected)


def test_training_equals_a_single_process_run_on_the_full_batch(
    ranks: list[dict[str, Any]],
) -> None:
    model = worker.make_model(seed=0)
    x, y = worker.batch()
    worker.loss_fn(model(x), y).backward()  # the worker's first, unstepped backward
    for _ in range(3):
        model.zero_grad()
        worker.loss_fn(model(x), y).backward()
        worker.sgd_step(model, lr=0.1)
    for result in ranks:
        _assert_all_close(result["params_after_training"], [p.detach() for p in model.parameters()])


def test_no_sync_accumulates_locally_then_averages_the_accumulation(
    ranks: list[dict[str, Any]],
) -> None:
    x, y = worker.batch()
    for rank, result in enumerate(ranks):
        model = worker.make_model(seed=0)
        x_a = worker.shard(x, rank, WORLD_SIZE).chunk(2)[0]
        y_a = worker.shard(y, rank, WORLD_SIZE).chunk(2)[0]
        worker.loss_fn(model(x_a), y_a).backward()
        _assert_all_close(result["no_sync_local_grads"], _grads(model))

    # Each rank summed two quarter-batch mean gradients: the average over ranks is
    # twice the full-batch mean gradient.
    expected = [2 * grad for grad in _full_batch_grads(worker.make_model(seed=0))]
    for result in ranks:
        _assert_all_close(result["no_sync_final_grads"], expected)


def test_negotiation_averages_parameters_that_only_some_ranks_used(
    ranks: list[dict[str, Any]],
) -> None:
    x, y = worker.batch()
    expected = [torch.zeros_like(p) for p in worker.TwoBranch(seed=0).parameters()]
    for rank in range(WORLD_SIZE):
        branches = worker.TwoBranch(seed=0)
        x_local, y_local = worker.shard(x, rank, WORLD_SIZE), worker.shard(y, rank, WORLD_SIZE)
        worker.loss_fn(branches(x_local, use_a=rank == 0), y_local).backward()
        expected = [e + g / WORLD_SIZE for e, g in zip(expected, _grads(branches))]
    for result in ranks:
        _assert_all_close(result["negotiated_grads"], expected)


def test_custom_collectives_replace_the_defaults(ranks: list[dict[str, Any]]) -> None:
    x, y = worker.batch()
    summed: list[torch.Tensor] | None = None
    for rank, result in enumerate(ranks):
        model = worker.make_model(seed=rank)
        # The custom broadcast did nothing: every rank keeps its own parameters.
        _assert_all_close(result["custom_params"], [p.detach() for p in model.parameters()])
        x_local, y_local = worker.shard(x, rank, WORLD_SIZE), worker.shard(y, rank, WORLD_SIZE)
        worker.loss_fn(model(x_local), y_local).backward()
        grads = _grads(model)
        summed = grads if summed is None else [s + g for s, g in zip(summed, grads)]
        # Called with the tensors and the given process group; buffers not broadcast.
        assert result["custom_calls"] == [("broadcast", 4, True), ("reduce", 4, True)]
    assert summed is not None
    for result in ranks:
        _assert_all_close(result["custom_grads"], summed)  # the custom reduction sums


@pytest.mark.parametrize("broadcast_buffers", [True, False])
def test_buffers_follow_rank_zero_only_when_broadcast(
    ranks: list[dict[str, Any]], broadcast_buffers: bool
) -> None:
    at_construction = [result[f"buffers_{broadcast_buffers}_construction"] for result in ranks]
    after_backward = [result[f"buffers_{broadcast_buffers}_backward"] for result in ranks]
    torch.testing.assert_close(at_construction[0], torch.ones(3))
    if broadcast_buffers:
        torch.testing.assert_close(at_construction[1], at_construction[0])
        torch.testing.assert_close(after_backward[1], after_backward[0])
    else:
        torch.testing.assert_close(at_construction[1], torch.full((3,), 2.0))
        assert not torch.allclose(after_backward[1], after_backward[0])


def test_default_reduction_rejects_sparse_gradients(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        assert "handles dense tensors only, got a torch.sparse_coo tensor" in result["sparse_error"]
        assert "pass your own reduce_function" in result["sparse_error"]


# ---------------------------------------------------------------- one-rank group
# Each test starts without a default process group: conftest.py fails a test that leaves one.


@contextlib.contextmanager
def _group_of_one() -> Iterator[None]:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{_free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def group_of_one() -> Iterator[None]:
    with _group_of_one():
        yield


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)
    )


def test_single_process_use_needs_no_process_group(tmp_path: Path) -> None:
    model = _model()
    reference = copy.deepcopy(model)
    ddp = DistributedDataParallel(model)

    x = torch.randn(8, 3)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        ddp(x).pow(2).mean().backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        reference(x).pow(2).mean().backward()
        reference_optimizer.step()
    torch.testing.assert_close(ddp.state_dict(), reference.state_dict())

    torch.save(ddp.state_dict(), tmp_path / "model.pt")
    restored = DistributedDataParallel(_model())
    restored.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    torch.testing.assert_close(restored.module.state_dict(), reference.state_dict())


@pytest.mark.parametrize("with_group", [False, True])
def test_state_dict_is_the_wrapped_modules(with_group: bool, tmp_path: Path) -> None:
    context = _group_of_one() if with_group else contextlib.nullcontext()
    with context:
        ddp = DistributedDataParallel(_model())
        with torch.no_grad():
            ddp.module[0].weight.fill_(0.5)
        state = ddp.state_dict()
        assert list(state) == list(ddp.module.state_dict())
        assert not any(key.startswith("module.") for key in state)
        torch.save(state, tmp_path / "ddp.pt")

        # The checkpoint loads into the bare model, and the bare model's into the wrapper.
        bare = _model()
        bare.load_state_dict(torch.load(tmp_path / "ddp.pt", weights_only=True))
        torch.testing.assert_close(bare[0].weight, torch.full((4, 3), 0.5))
        with torch.no_grad():
            bare[2].bias.fill_(7.0)
        result = ddp.load_state_dict(bare.state_dict())
        assert (result.missing_keys, result.unexpected_keys) == ([], [])
        torch.testing.assert_close(ddp.module[2].bias, torch.tensor([7.0]))


def test_load_state_dict_passes_strict_to_the_wrapped_module() -> None:
    ddp = DistributedDataParallel(torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "bias"'):
        ddp.load_state_dict({"weight": torch.zeros(2, 2)})
    result = ddp.load_state_dict({"weight": torch.ones(2, 2)}, strict=False)
    assert result.missing_keys == ["bias"]
    torch.testing.assert_close(ddp.module.weight, torch.ones(2, 2))


def test_custom_broadcast_updates_parameters_and_buffers_in_place_without_grad() -> None:
    source = _model()
    with torch.no_grad():
        for tensor in (*source.parameters(), *source.buffers()):
            tensor.add_(1)
    seen: list[tuple[int, bool]] = []

    def broadcast_from_source(tensors: Sequence[torch.Tensor], group: Any) -> None:
        seen.append((len(tensors), torch.is_grad_enabled()))
        for tensor, value in zip(tensors, (*source.parameters(), *source.buffers())):
            tensor.copy_(value)  # in place on leaves that require grad

    model = _model()
    DistributedDataParallel(model, broadcast_function=broadcast_from_source)
    n_params, n_buffers = len(list(model.parameters())), len(list(model.buffers()))
    assert seen == [(n_params + n_buffers, False)]
    torch.testing.assert_close(model.state_dict(), source.state_dict())
    assert all(param.requires_grad and param.is_leaf for param in model.parameters())


def test_custom_collectives_run_without_a_process_group() -> None:
    calls: list[tuple[str, int, bool]] = []

    def broadcast(tensors: Sequence[torch.Tensor], group: Any) -> None:
        calls.append(("broadcast", len(tensors), torch.is_grad_enabled()))

    def reduce(tensors: Sequence[torch.Tensor], group: Any) -> None:
        calls.append(("reduce", len(tensors), torch.is_grad_enabled()))
        for tensor in tensors:
            tensor.mul_(2.0)

    layer = torch.nn.Linear(2, 1)
    ddp = DistributedDataParallel(
        layer, broadcast_buffers=False, reduce_function=reduce, broadcast_function=broadcast
    )
    ddp(torch.ones(1, 2)).sum().backward()
    assert calls == [("broadcast", 2, False), ("reduce", 2, False)]
    assert layer.weight.grad is not None
    torch.testing.assert_close(layer.weight.grad, torch.full((1, 2), 2.0))


def test_foreach_wrapper_multiplies_tensors_in_place() -> None:
    tensors = [torch.ones(3), torch.full((2, 2), 4.0, dtype=torch.float64), torch.ones(1)]
    get_foreach_wrapper().multiply(tensors, 0.25)
    torch.testing.assert_close(tensors[0], torch.full((3,), 0.25))
    torch.testing.assert_close(tensors[1], torch.ones(2, 2, dtype=torch.float64))
    torch.testing.assert_close(tensors[2], torch.full((1,), 0.25))


@pytest.mark.usefixtures("group_of_one")
def test_ignored_torch_ddp_arguments_warn_naming_them() -> None:
    with pytest.warns(UserWarning, match="ignores these arguments.*: device_ids, static_graph"):
        DistributedDataParallel(torch.nn.Linear(2, 2), static_graph=True, device_ids=[0])


@pytest.mark.usefixtures("group_of_one")
def test_unknown_keyword_arguments_are_rejected() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['bucket_size'\]"):
        DistributedDataParallel(torch.nn.Linear(2, 2), bucket_size=3)


@pytest.mark.usefixtures("group_of_one")
def test_comm_hooks_run_once_per_synchronized_backward() -> None:
    ddp = DistributedDataParallel(torch.nn.Linear(2, 2))
    seen: list[Any] = []
    handle = ddp.register_comm_hook(seen.append)

    ddp(torch.ones(1, 2)).sum().backward()
    assert seen == [ddp]

    with ddp.no_sync():
        ddp(torch.ones(1, 2)).sum().backward()
    assert len(seen) == 1

    handle.remove()
    ddp(torch.ones(1, 2)).sum().backward()
    assert len(seen) == 1


@pytest.mark.usefixtures("group_of_one")
def test_outputs_in_containers_synchronize_once_per_backward() -> None:
    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> dict[str, Any]:
            out = self.linear(x)
            return {"a": out, "rest": (out * 2, [out * 3, "text"])}

    ddp = DistributedDataParallel(TwoHeads())
    calls: list[Any] = []
    ddp.register_comm_hook(calls.append)

    outputs = ddp(torch.ones(1, 2))
    outputs["rest"][1][0].sum().backward()  # only a nested output reaches the loss
    assert len(calls) == 1

    first, second = ddp(torch.ones(1, 2)), ddp(torch.zeros(1, 2))
    (first["a"].sum() + second["rest"][0].sum()).backward()
    assert len(calls) == 2


@pytest.mark.usefixtures("group_of_one")
def test_forward_without_grad_does_not_schedule_synchronization() -> None:
    ddp = DistributedDataParallel(torch.nn.Linear(2, 2))
    calls: list[Any] = []
    ddp.register_comm_hook(calls.append)
    with torch.no_grad():
        output = ddp(torch.ones(1, 2))
    assert not output.requires_grad
    assert calls == []


@pytest.mark.usefixtures("group_of_one")
def test_no_sync_restores_synchronization_after_an_error() -> None:
    ddp = DistributedDataParallel(torch.nn.Linear(2, 2))
    calls: list[Any] = []
    ddp.register_comm_hook(calls.append)
    with pytest.raises(KeyError), ddp.no_sync():
        raise KeyError("boom")
    ddp(torch.ones(1, 2)).sum().backward()
    assert len(calls) == 1
