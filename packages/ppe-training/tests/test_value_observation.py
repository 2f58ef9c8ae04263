"""observe_value and observe_lr: values recorded into the observation and the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.training import PRIORITY_WRITER, ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, observe_lr, observe_value


def _optimizer(groups: int = 1, lr: float = 0.1) -> torch.optim.Optimizer:
    params = [
        {"params": [torch.nn.Parameter(torch.zeros(2))], "lr": lr * (g + 1)} for g in range(groups)
    ]
    return torch.optim.SGD(params, lr=lr)


def _train(manager: ExtensionsManager, each: Any = None) -> None:
    while not manager.stop_trigger:
        with manager.run_iteration():
            if each is not None:
                each(manager)


def test_observe_lr_logs_the_decaying_learning_rate_each_epoch(tmp_path: Path) -> None:
    optimizer = _optimizer(lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    manager = ExtensionsManager(
        {}, {"main": optimizer}, 3, iters_per_epoch=4, out_dir=tmp_path, extensions=[LogReport()]
    )
    # Registered after the LogReport, it still runs first (writer priority).
    manager.extend(observe_lr(optimizer))

    def step_at_epoch_end(m: ExtensionsManager) -> None:
        optimizer.step()
        if (m.iteration + 1) % 4 == 0:
            scheduler.step()

    _train(manager, step_at_epoch_end)
    log = manager.get_extension("LogReport").log
    assert [entry["lr"] for entry in log] == [0.5, 0.25, 0.125]


def test_observe_lr_of_another_param_group_under_another_key(tmp_path: Path) -> None:
    optimizer = _optimizer(groups=2, lr=0.1)
    ext = observe_lr(optimizer, param_group=1, observation_key="lr/head", trigger=(2, "iteration"))
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=4, out_dir=tmp_path)
    manager.extend(ext)
    seen: list[Any] = []
    manager.extend(lambda m: seen.append(m.observation.get("lr/head")), name="probe")
    _train(manager)
    assert seen == [None, 0.2, None, 0.2]


def test_observe_value_records_what_the_function_returns(tmp_path: Path) -> None:
    ext = observe_value("progress", lambda manager: manager.epoch_detail)
    assert ext.priority == PRIORITY_WRITER  # type: ignore[attr-defined]
    manager = ExtensionsManager(
        {}, {}, 2, iters_per_epoch=3, out_dir=tmp_path, extensions=[LogReport(), ext]
    )
    _train(manager)
    assert [entry["progress"] for entry in manager.get_extension("LogReport").log] == [1.0, 2.0]


def test_observed_tensors_are_stored_detached(tmp_path: Path) -> None:
    weight = torch.nn.Parameter(torch.tensor(3.0))
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1, out_dir=tmp_path)
    manager.extend(observe_value("w2", lambda m: weight * 2), trigger=(1, "iteration"))
    _train(manager)
    value = manager.observation["w2"]
    assert not value.requires_grad
    assert value.item() == 6.0


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: observe_value("", lambda m: 0), ValueError, "observation_key must be a non-empty"),
        (lambda: observe_value("x", 3), TypeError, "target_func must be callable"),  # type: ignore[arg-type]
        (lambda: observe_lr(object()), TypeError, "needs a torch.optim.Optimizer, got object"),  # type: ignore[arg-type]
        (lambda: observe_lr(_optimizer(), param_group=1), IndexError, "has 1 parameter group"),
        (lambda: observe_lr(_optimizer(), param_group="0"), TypeError, "index, got '0'"),  # type: ignore[arg-type]
        (lambda: observe_lr(_optimizer(), trigger=(1, "hour")), ValueError, "hour"),
        # PPE 0.9 has no trigger parameter: ours is keyword-only, past PPE's three.
        (lambda: observe_lr(_optimizer(), 0, "lr", (1, "epoch")), TypeError, "positional"),  # type: ignore[call-arg]
    ],
)
def test_rejects_bad_arguments(make: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()
