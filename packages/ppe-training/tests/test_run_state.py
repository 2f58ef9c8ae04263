"""Where a run stands is one object: the manager's run state, read by the trainer, its logic
and the Ignite manager (the epoch length is never a placeholder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": F.mse_loss(self.linear(x), t)}


def batches(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {"x": torch.randn(3, 2, generator=g), "t": torch.randn(3, 1, generator=g)} for _ in range(n)
    ]


def make_trainer(tmp_path: Path, **kwargs: Any) -> ppe.training.Trainer:
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = ppe.engine.create_trainer(model, optimizer, 2, out_dir=str(tmp_path), **kwargs)
    ppe.runtime.to(model, "cpu")
    return trainer


def test_trainer_manager_and_logic_read_one_run_state(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    state = trainer.run_state
    assert state is trainer.manager.run_state
    assert (state.iteration, state.epoch_length, trainer.train_len) == (0, None, None)

    trainer.run(batches(5))

    assert state is trainer.run_state  # the same object, filled in when the run began
    assert trainer.handler.logic.run_state is state
    assert (state.iteration, state.epoch_length, state.epoch) == (10, 5, 2)
    assert (trainer.iteration, trainer.epoch, trainer.train_len) == (10, 2, 5)
    assert trainer.manager.iters_per_epoch == 5
    assert trainer.is_epoch_last_iter(4) and not trainer.is_epoch_last_iter(3)


def test_the_epoch_is_not_guessed_before_the_run_begins(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    with pytest.raises(RuntimeError, match=r"epoch length is not known before the run begins"):
        trainer.epoch  # noqa: B018
    with pytest.raises(RuntimeError, match=r"epoch length is not known"):
        trainer.manager.iters_per_epoch  # noqa: B018
    assert not trainer.is_epoch_last_iter(0)


def test_a_resumed_run_keeps_its_iteration_until_the_run_gives_the_epoch_length(
    tmp_path: Path,
) -> None:
    first = make_trainer(tmp_path)
    first.run(batches(4), train_len=3)  # 2 epochs of 3 iterations
    saved = first.state_dict()

    resumed = make_trainer(tmp_path, stop_trigger=(4, "epoch"))
    resumed.load_state_dict(saved)
    assert (resumed.run_state.iteration, resumed.run_state.epoch_length) == (6, None)
    resumed.run(batches(4), train_len=3)
    assert (resumed.iteration, resumed.epoch) == (12, 4)


def test_an_epoch_length_cannot_change_once_iterations_ran(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, stop_trigger=(4, "iteration"))
    trainer.run(batches(3))
    with pytest.raises(
        ValueError,
        match=r"has 5 iterations per epoch but the run already started, at iteration 4, had 3",
    ):
        trainer.run(batches(5))


def test_a_hand_written_loop_has_its_epoch_length_from_the_start(tmp_path: Path) -> None:
    model = Regressor()
    manager = ppe.training.ExtensionsManager(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        1,
        iters_per_epoch=4,
        out_dir=str(tmp_path),
    )
    state = manager.run_state
    assert (state.iteration, state.epoch_length, manager.epoch_detail) == (0, 4, 0.0)
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
        assert manager.iteration == state.iteration
    assert (state.iteration, state.epoch, manager.epoch_detail) == (4, 1, 1.0)
    manager.iteration = 2  # PPE code sets it: the run state is where it goes
    assert (state.iteration, manager.epoch_detail) == (2, 0.5)


def test_the_ignite_manager_learns_the_epoch_length_when_the_engine_runs(tmp_path: Path) -> None:
    ignite_engine = pytest.importorskip("ignite.engine")
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    engine = ignite_engine.Engine(lambda engine, batch: None)
    manager = ppe.training.IgniteExtensionsManager(
        engine, model, optimizer, 2, out_dir=str(tmp_path)
    )
    assert manager.run_state.epoch_length is None
    engine.run(range(3), max_epochs=2)
    assert (manager.run_state.epoch_length, manager.iteration, manager.epoch) == (3, 6, 2)
