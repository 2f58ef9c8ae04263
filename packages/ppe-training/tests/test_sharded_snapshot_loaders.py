"""Exact mid-epoch resume of a stateful data loader (torchdata's StatefulDataLoader)
through sharded snapshots: as a state object of the manager, and as the trainer's loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module

stateful = pytest.importorskip(
    "torchdata.stateful_dataloader",
    reason='needs torchdata: pip install "ppe-training[torchdata]"',
)

SHARDED = ext_module.SnapshotMode.SHARDED
# torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


class Recording(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Ten samples; records which ones were fetched (in this process)."""

    def __init__(self) -> None:
        self.fetched: list[int] = []

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.fetched.append(i)
        x = torch.full((3,), float(i))
        return {"x": x, "t": x.sum(0, keepdim=True) / 10}


class Crash(Exception):
    pass


def _loader(dataset: Recording, num_workers: int, generator: bool = False) -> Any:
    # Without generator=, the sampler draws its seed from torch's RNG and saves its own
    # generator; torchdata 0.11 does not save a generator= passed to the loader.
    return stateful.StatefulDataLoader(
        dataset,
        batch_size=2,
        shuffle=True,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0) if generator else None,
    )


def _run_manager(out: Path, num_workers: int, crash_at: int | None = None) -> list[list[float]]:
    """Train 3 epochs of 5 batches; the batches trained on, in order."""
    torch.manual_seed(0)
    loader = _loader(Recording(), num_workers)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    manager = ExtensionsManager(
        model,
        optimizer,
        3,
        iters_per_epoch=len(loader),
        out_dir=out,
        state_objects={"loader": loader},
    )
    manager.extend(
        ext_module.snapshot(snapshot_mode=SHARDED, autoload=True), trigger=(3, "iteration")
    )
    seen: list[list[float]] = []
    while not manager.stop_trigger:
        for batch in loader:
            if manager.iteration == crash_at:
                return seen
            with manager.run_iteration():
                seen.append(batch["x"][:, 0].tolist())
                model(batch["x"]).sum().backward()
                optimizer.step()
    return seen


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_loader_state_object_resumes_in_the_middle_of_its_epoch(
    tmp_path: Path, num_workers: int
) -> None:
    reference = _run_manager(tmp_path / "reference", num_workers)
    assert len(reference) == 15
    first = _run_manager(tmp_path / "run", num_workers, crash_at=7)  # snapshot at 6
    assert first == reference[:7]
    resumed = _run_manager(tmp_path / "run", num_workers)
    assert resumed == reference[6:]  # batch 7 of 15 (2nd of epoch 2) onwards, no replay


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.linear(x), t)}


def _run_trainer(
    out: Path, generator: bool, crash_at: int | None = None
) -> tuple[Recording, dict[str, Any]]:
    torch.manual_seed(0)
    dataset = Recording()
    loader = _loader(dataset, 0, generator)
    model = Regressor()
    pytorch_pfn_extras.runtime.to(model, "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = pytorch_pfn_extras.engine.create_trainer(model, optimizer, 3, out_dir=out)
    trainer.extend(
        ext_module.snapshot(snapshot_mode=SHARDED, autoload=True), trigger=(3, "iteration")
    )

    def crash(manager: Any) -> None:
        if manager.iteration == crash_at:
            message = f"crash at iteration {crash_at}"
            raise Crash(message)

    trainer.extend(crash, trigger=(1, "iteration"), priority=-1000)  # after the snapshot
    try:
        trainer.run(loader)
    except Crash:
        pass
    return dataset, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("generator", [False, True])
def test_trainer_resumes_a_stateful_loader_without_replaying_the_epoch(
    tmp_path: Path, generator: bool
) -> None:
    reference, reference_weights = _run_trainer(tmp_path / "reference", generator)
    assert len(reference.fetched) == 30
    _run_trainer(tmp_path / "run", generator, crash_at=7)
    resumed, weights = _run_trainer(tmp_path / "run", generator)
    # Resumed at iteration 6: the loader's own state continues the epoch (samples 13-30);
    # replaying the epoch up to the snapshot would fetch its first batch again.
    assert resumed.fetched == reference.fetched[12:]
    for name, value in reference_weights.items():
        torch.testing.assert_close(weights[name], value)
