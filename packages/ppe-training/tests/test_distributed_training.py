"""Distributed training with real processes: 2 and 4 gloo ranks started by torchrun.

The module is also the worker: ``python -m torch.distributed.run --standalone --nproc-per-node N
test_distributed_training.py OUT_DIR`` runs :func:`worker` on every rank, which trains through
the manager and through ``create_trainer`` with ppe's DistributedDataParallel, evaluates with
the distributed evaluators, and exercises the ``distributed=True`` extensions; each rank saves
its results to ``OUT_DIR/rank<r>.pt``. The tests compare them with single-process references
computed here from the same seeds and data: training on the concatenation of the ranks'
batches, evaluating the whole validation set.
"""

from __future__ import annotations

import datetime
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import pytorch_pfn_extras.distributed as ppe_distributed
import pytorch_pfn_extras.engine as ppe_engine
import pytorch_pfn_extras.training
from pytorch_pfn_extras import reporting, runtime
from pytorch_pfn_extras.nn.parallel import DistributedDataParallel
from pytorch_pfn_extras.training import ExtensionsManager, extensions, triggers

ITERS_PER_EPOCH = 3
EPOCHS = 2
GLOBAL_BATCH = 8  # split evenly over 2 or 4 ranks
N_VAL = 11  # not a multiple of the world size: the ranks' shares differ
LR, MOMENTUM = 0.1, 0.9
ACCUMULATES = {
    "mean": (extensions.AverageAccumulate, np.mean),
    "max": (extensions.MaxAccumulate, np.max),
    "min": (extensions.MinAccumulate, np.min),
    "std": (extensions.StandardDeviationAccumulate, np.std),
    "ustd": (extensions.UnbiasedStandardDeviationAccumulate, lambda a: np.std(a, ddof=1)),
}
# The early-stopping scenario: the global value improves for 3 epochs, then not; each rank's
# value differs from it by ``offset(rank) * BUMP[epoch]`` (the offsets sum to zero).
GLOBAL_VALUES = [5.0, 4.0, 3.0, 3.5, 3.25, 3.0, 2.0, 1.0]
BUMP = [0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------- shared by worker and tests


def make_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(GLOBAL_BATCH, 4, generator=generator),
            torch.randn(GLOBAL_BATCH, 2, generator=generator),
        )
        for _ in range(ITERS_PER_EPOCH * EPOCHS)
    ]


def validation_set() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(N_VAL, 4, generator=generator), torch.randn(N_VAL, 2, generator=generator)
    return [{"x": x[i], "y": y[i], "idx": torch.tensor(i)} for i in range(N_VAL)]


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    return tensor.chunk(world_size)[rank]


def offset(rank: int, world_size: int) -> float:
    return rank - (world_size - 1) / 2


class Regressor(torch.nn.Module):
    """The trainer's model: a batch dict in, ``loss`` (and the mean sample index) out."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def forward(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> dict[str, Any]:
        return {"loss": F.mse_loss(self.net(x), y), "idx": idx.double().mean()}


# ------------------------------------------------------------------------------ the worker


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _val_loader(rank: int, world_size: int) -> torch.utils.data.DataLoader[Any]:
    data = validation_set()
    sampler = ppe_distributed.DistributedValidationSampler(data, shuffle=True, seed=3)
    assert (sampler.num_replicas, sampler.rank) == (world_size, rank)
    return torch.utils.data.DataLoader(data, batch_size=2, sampler=sampler)  # type: ignore[arg-type]


class _Recorder:
    """Records the observed values of some keys at every iteration (a reader, run last)."""

    priority = 0

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes
        self.records: list[tuple[int, dict[str, Any]]] = []

    def __call__(self, manager: Any) -> None:
        found = {k: v for k, v in manager.observation.items() if k.startswith(self.prefixes)}
        if found:
            self.records.append((manager.iteration, found))


def _train_with_manager(rank: int, world_size: int, out: Path) -> dict[str, Any]:
    net = make_net()
    ddp = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    manager = ExtensionsManager(
        {"main": ddp},
        {"main": optimizer},
        EPOCHS,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=str(out),
    )
    for name, (cls, _) in ACCUMULATES.items():
        manager.extend(cls(("loss", f"acc/{name}"), distributed=True))
    manager.extend(
        extensions.observe_value("obs/rank", lambda m: float(rank), distributed=True),
        trigger=(1, "epoch"),
    )
    manager.extend(
        extensions.observe_value(
            "obs/vector", lambda m: torch.full((2,), float(rank)), distributed=True
        ),
        trigger=(1, "epoch"),
    )

    def evaluate(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> None:
        reporting.report({"val/loss": F.mse_loss(net(x), y), "val/idx": idx.double().mean()})

    manager.extend(
        extensions.DistributedEvaluator(_val_loader(rank, world_size), net, eval_func=evaluate)
    )
    log_report = extensions.LogReport(distributed=True)
    manager.extend(log_report)
    recorder = _Recorder(("acc/", "obs/"))
    manager.extend(recorder)
    losses = []
    for x, y in global_batches():
        with manager.run_iteration():
            optimizer.zero_grad()
            loss = F.mse_loss(ddp(shard(x, rank, world_size)), shard(y, rank, world_size))
            loss.backward()
            optimizer.step()
            reporting.report({"loss": loss})
            losses.append(loss.item())
    assert manager.stop_trigger
    return {
        "params": _params(net),
        "losses": losses,
        "log": log_report.log,
        "records": recorder.records,
    }


def _train_with_trainer(rank: int, world_size: int, out: Path) -> dict[str, Any]:
    model = Regressor()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    evaluator = ppe_engine.create_evaluator(
        ddp, distributed=True, options={"eval_report_keys": ["loss", "idx"]}
    )
    assert isinstance(evaluator, pytorch_pfn_extras.training.DistributedEvaluator)
    log_report = extensions.LogReport(distributed=True)
    trainer = ppe_engine.create_trainer(
        ddp,
        optimizer,
        EPOCHS,
        evaluator=evaluator,
        extensions=[log_report],
        out_dir=str(out),
        options={"backward_outputs": ["loss"], "train_report_keys": ["loss"]},
        transform_model=lambda name, module: module.module,
    )
    runtime.to(ddp, "cpu")
    train = [
        {"x": shard(x, rank, world_size), "y": shard(y, rank, world_size), "idx": torch.zeros(1)}
        for x, y in global_batches()
    ]
    trainer.run(_EpochBatches(train), _val_loader(rank, world_size))
    return {"params": _params(model.net), "log": log_report.log}


class _EpochBatches:
    """A loader whose every pass yields the next epoch's batches of ``batches``."""

    def __init__(self, batches: list[Any]) -> None:
        self._batches = batches
        self._epoch = 0

    def __len__(self) -> int:
        return ITERS_PER_EPOCH

    def __iter__(self) -> Iterator[Any]:
        start = self._epoch * ITERS_PER_EPOCH
        self._epoch += 1
        return iter(self._batches[start : start + ITERS_PER_EPOCH])


def _stop_on_the_global_value(rank: int, world_size: int, out: Path) -> dict[str, Any]:
    """EarlyStoppingTrigger and ReduceLROnPlateau on a value averaged over the ranks."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    stop = triggers.EarlyStoppingTrigger(
        monitor="global/v", patience=1, max_trigger=(len(GLOBAL_VALUES), "epoch")
    )
    manager = ExtensionsManager(
        {},
        {"main": optimizer},
        len(GLOBAL_VALUES),
        iters_per_epoch=2,
        out_dir=str(out),
        stop_trigger=stop,
    )
    manager.extend(extensions.AverageAccumulate(("v", "global/v"), distributed=True))
    manager.extend(
        extensions.LRScheduler(plateau, stepper=extensions.LRScheduler.step_by_value("global/v"))
    )
    lrs = []
    while not manager.stop_trigger:
        with manager.run_iteration():
            epoch = manager.epoch  # 0-based inside the iteration
            local = GLOBAL_VALUES[epoch] + offset(rank, world_size) * BUMP[epoch]
            reporting.report({"v": local})
        lrs.append(optimizer.param_groups[0]["lr"])
    return {"stop_iteration": manager.iteration, "lrs": lrs}


def _resume_partial_interval(rank: int, world_size: int, out: Path) -> dict[str, Any]:
    """Rank 0's state, taken in the middle of an interval, loaded by every rank."""

    def build() -> tuple[ExtensionsManager, Any, Any]:
        manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(out))
        log_report = extensions.LogReport(distributed=True)
        average = extensions.AverageAccumulate(("v", "avg"), distributed=True)
        manager.extend(log_report)
        manager.extend(average)
        return manager, log_report, average

    manager, log_report, average = build()
    with manager.run_iteration():
        reporting.report({"v": float(rank + 1)})
    states = [(log_report.state_dict(), average.state_dict())]
    dist.broadcast_object_list(states, src=0)  # what a snapshot by saver_rank=0 holds
    resumed, resumed_log, resumed_average = build()
    resumed_log.load_state_dict(states[0][0])
    resumed_average.load_state_dict(states[0][1])
    resumed.iteration = 1
    with resumed.run_iteration():
        reporting.report({"v": 10.0 * (rank + 1)})
    return {"entry": resumed_log.log[-1]}


def worker(out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = Path(out_dir)
    try:
        results = {
            "manager": _train_with_manager(rank, world_size, out / f"manager{rank}"),
            "trainer": _train_with_trainer(rank, world_size, out / f"trainer{rank}"),
            "stop": _stop_on_the_global_value(rank, world_size, out / f"stop{rank}"),
            "resume": _resume_partial_interval(rank, world_size, out / f"resume{rank}"),
        }
        torch.save(results, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------ the tests


@pytest.fixture(
    scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=lambda n: f"{n}ranks"
)
def ranks(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    torchrun: Callable[..., subprocess.CompletedProcess[str]],
) -> list[dict[str, Any]]:
    world_size: int = request.param
    out = tmp_path_factory.mktemp(f"world{world_size}")
    result = torchrun(world_size, __file__, str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


class _Reference:
    """One process training on the concatenated batches; the states at each step."""

    def __init__(
        self, model: torch.nn.Module, net: torch.nn.Module, loss_fn: Callable[..., torch.Tensor]
    ) -> None:
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        self.net = net
        self.before_step: list[list[torch.Tensor]] = []
        self.after_epoch: list[list[torch.Tensor]] = []
        for step, (x, y) in enumerate(global_batches()):
            self.before_step.append(_params(net))
            optimizer.zero_grad()
            loss_fn(x, y).backward()
            optimizer.step()
            if (step + 1) % ITERS_PER_EPOCH == 0:
                self.after_epoch.append(_params(net))
        self.final = _params(net)

    def evaluate(self, params: list[torch.Tensor]) -> float:
        with torch.no_grad():
            for p, value in zip(self.net.parameters(), params):
                p.copy_(value)
            data = validation_set()
            x = torch.stack([item["x"] for item in data])
            y = torch.stack([item["y"] for item in data])
            return F.mse_loss(self.net(x), y).item()


@pytest.fixture(scope="module")
def reference() -> _Reference:
    net = make_net()
    return _Reference(net, net, lambda x, y: F.mse_loss(net(x), y))


def _close(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def test_manager_training_equals_one_process_on_the_concatenated_batches(
    ranks: list[dict[str, Any]], reference: _Reference
) -> None:
    for result in ranks:
        _close(result["manager"]["params"], reference.final)


def test_trainer_training_equals_one_process_on_the_concatenated_batches(
    ranks: list[dict[str, Any]],
) -> None:
    model = Regressor()
    expected = _Reference(model, model.net, lambda x, y: model(x, y, torch.zeros(1))["loss"])
    for result in ranks:
        _close(result["trainer"]["params"], expected.final)


def _local_losses(reference: _Reference, world_size: int) -> np.ndarray:
    """Each rank's loss at each step of the reference run: shape (steps, ranks)."""
    net = make_net()
    losses = np.zeros((len(reference.before_step), world_size))
    with torch.no_grad():
        for step, ((x, y), params) in enumerate(zip(global_batches(), reference.before_step)):
            for p, value in zip(net.parameters(), params):
                p.copy_(value)
            for rank in range(world_size):
                out = net(shard(x, rank, world_size))
                losses[step, rank] = F.mse_loss(out, shard(y, rank, world_size)).item()
    return losses


def test_each_rank_trained_on_its_share_of_every_batch(
    ranks: list[dict[str, Any]], reference: _Reference
) -> None:
    expected = _local_losses(reference, len(ranks))
    for rank, result in enumerate(ranks):
        np.testing.assert_allclose(result["manager"]["losses"], expected[:, rank], rtol=1e-5)


def test_distributed_log_report_logs_the_mean_over_every_rank_and_iteration(
    ranks: list[dict[str, Any]], reference: _Reference
) -> None:
    losses = _local_losses(reference, len(ranks))
    for result in ranks:
        for section in ("manager", "trainer"):
            log = result[section]["log"]
            assert [entry["iteration"] for entry in log] == [3, 6]
            key = "loss" if section == "manager" else "train/loss"
            for epoch, entry in enumerate(log):
                expected = losses[epoch * ITERS_PER_EPOCH : (epoch + 1) * ITERS_PER_EPOCH].mean()
                assert entry[key] == pytest.approx(expected, rel=1e-5)
    # Every rank logged the same entries (their elapsed times aside).
    for section in ("manager", "trainer"):
        logs = [
            [{k: v for k, v in e.items() if k != "elapsed_time"} for e in r[section]["log"]]
            for r in ranks
        ]
        assert all(log == logs[0] for log in logs)


def test_distributed_accumulations_reduce_over_every_rank_and_iteration(
    ranks: list[dict[str, Any]], reference: _Reference
) -> None:
    losses = _local_losses(reference, len(ranks))
    for result in ranks:
        records = dict(result["manager"]["records"])
        assert sorted(records) == [3, 6]
        for epoch, iteration in enumerate((3, 6)):
            values = losses[epoch * ITERS_PER_EPOCH : iteration].reshape(-1)
            for name, (_, reduce) in ACCUMULATES.items():
                actual = float(records[iteration][f"acc/{name}"])
                assert actual == pytest.approx(float(reduce(values)), rel=1e-5), name


def test_distributed_observe_value_records_the_mean_over_the_ranks(
    ranks: list[dict[str, Any]],
) -> None:
    mean_rank = (len(ranks) - 1) / 2
    for result in ranks:
        for _, values in result["manager"]["records"]:
            assert values["obs/rank"] == pytest.approx(mean_rank)
            torch.testing.assert_close(values["obs/vector"], torch.full((2,), mean_rank))
        assert all(
            entry["obs/rank"] == pytest.approx(mean_rank) for entry in result["manager"]["log"]
        )


def test_distributed_evaluators_evaluate_each_validation_sample_once(
    ranks: list[dict[str, Any]], reference: _Reference
) -> None:
    mean_index = (N_VAL - 1) / 2  # lower if a sample were missing or duplicated
    for result in ranks:
        manager_log, trainer_log = result["manager"]["log"], result["trainer"]["log"]
        for epoch in range(EPOCHS):
            expected = reference.evaluate(reference.after_epoch[epoch])
            assert manager_log[epoch]["val/loss"] == pytest.approx(expected, rel=1e-5)
            assert trainer_log[epoch]["val/loss"] == pytest.approx(expected, rel=1e-5)
            assert manager_log[epoch]["val/idx"] == pytest.approx(mean_index)
            assert trainer_log[epoch]["val/idx"] == pytest.approx(mean_index)


def _early_stopping_epoch(values: list[float], patience: int) -> int:
    best, count = math.inf, 0
    for epoch, value in enumerate(values, start=1):
        if value < best:
            best, count = value, 0
        else:
            count += 1
        if count >= patience:
            return epoch
    return len(values)


def test_early_stopping_and_plateau_see_the_global_value_on_every_rank(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    stop_epoch = _early_stopping_epoch(GLOBAL_VALUES, patience=1)
    # Alone, the ranks would disagree: the highest rank would stop earlier.
    local = [v + offset(world_size - 1, world_size) * b for v, b in zip(GLOBAL_VALUES, BUMP)]
    assert _early_stopping_epoch(local, patience=1) < stop_epoch
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    expected_lrs = []
    for value in GLOBAL_VALUES[:stop_epoch]:
        plateau.step(value)
        expected_lrs.append(optimizer.param_groups[0]["lr"])
    for result in ranks:
        assert result["stop"]["stop_iteration"] == 2 * stop_epoch
        lrs = result["stop"]["lrs"]
        assert lrs[1::2] == expected_lrs  # the lr after each epoch's last iteration
    assert expected_lrs[-1] < 1.0  # the plateau was detected


def test_a_partial_interval_loaded_from_one_ranks_state_counts_once(
    ranks: list[dict[str, Any]],
) -> None:
    world_size = len(ranks)
    # Rank 0's first value (1.0) from its state, then every rank's second value 10 * (r + 1).
    values = [1.0] + [10.0 * (rank + 1) for rank in range(world_size)]
    for result in ranks:
        entry = result["resume"]["entry"]
        assert entry["iteration"] == 2
        assert entry["v"] == pytest.approx(np.mean(values))
        assert entry["avg"] == pytest.approx(np.mean(values))


if __name__ == "__main__":
    worker(sys.argv[1])
