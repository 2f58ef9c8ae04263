"""A finished run resumed with a longer training length goes on from its last snapshot."""

from __future__ import annotations

import pathlib

import torch

from pytorch_pfn_extras.reporting import report
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import snapshot
from pytorch_pfn_extras.training.triggers import EarlyStoppingTrigger


def run(out: pathlib.Path, max_epochs: int, stop_trigger: object = None) -> tuple[int, int]:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(
        model,
        optimizer,
        max_epochs,
        iters_per_epoch=3,
        out_dir=str(out),
        stop_trigger=stop_trigger,  # type: ignore[arg-type]
        extensions=[snapshot(autoload=True)],
    )
    done = 0
    while not manager.stop_trigger:
        with manager.run_iteration():
            report({"main/loss": 1.0})
            done += 1
    return manager.iteration, done


def test_more_epochs_after_a_finished_run_trains_only_the_new_epochs(
    tmp_path: pathlib.Path,
) -> None:
    assert run(tmp_path, 2) == (6, 6)
    assert run(tmp_path, 4) == (12, 6)
    assert run(tmp_path, 4) == (12, 0)


def test_a_fired_stateful_stop_trigger_stays_fired_on_resume(tmp_path: pathlib.Path) -> None:
    # Early stopping that fired (the loss never improves, patience 1: it stops after the second
    # epoch) is not re-evaluated at the same iteration after a resume.
    def trigger() -> EarlyStoppingTrigger:
        return EarlyStoppingTrigger(monitor="main/loss", patience=1, max_trigger=(100, "epoch"))

    assert run(tmp_path, 10, trigger()) == (6, 6)
    assert run(tmp_path, 10, trigger()) == (6, 0)
