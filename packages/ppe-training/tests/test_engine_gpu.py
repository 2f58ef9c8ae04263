"""The trainer's hot path on CUDA: no device synchronisation from the engine itself."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
import pytorch_pfn_extras.training.metrics
from pytorch_pfn_extras.training import extensions

pytestmark = pytest.mark.gpu


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(x)
        return {"loss": F.cross_entropy(y, t), "y": y}


def test_trainer_iterations_do_not_synchronize_the_device(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = Model()
    data = [
        {"x": torch.randn(8, 16).pin_memory(), "t": torch.randint(0, 4, (8,)).pin_memory()}
        for _ in range(20)
    ]
    modes: list[int] = []

    def arm(manager: Any) -> None:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        modes.append(manager.iteration)

    def disarm(manager: Any) -> None:
        torch.cuda.set_sync_debug_mode("default")
        modes.append(manager.iteration)

    out = io.StringIO()
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        1,
        device="cuda:0",
        out_dir=str(tmp_path),
        options={"train_report_keys": ["loss"]},
        extensions=[
            extensions.LogReport(),
            extensions.ProgressBar(update_interval=1000, out=out),
            extensions.PrintReport(out=out),
        ],
    )
    trainer.extend(
        arm, trigger=ppe.training.triggers.ManualScheduleTrigger([2], "iteration"), priority=-10_000
    )
    # Before LogReport's (per epoch) summary, which reads the values at the epoch's end.
    trainer.extend(disarm, trigger=(20, "iteration"), priority=10_000)
    ppe.runtime.to(model, "cuda:0")
    try:
        trainer.run(data)  # iterations 3..20 run with syncs turned into errors
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert modes == [2, 20]
    assert trainer.iteration == 20


def test_evaluator_steps_do_not_synchronize_the_device(tmp_path: Any) -> None:
    model = Model().cuda()
    ppe.runtime.to(model, "cuda:0")
    evaluator = ppe.engine.create_evaluator(
        model,
        device="cuda:0",
        metrics=[ppe.training.metrics.AccuracyMetric("t", "y")],
        options={"eval_report_keys": ["accuracy"]},
    )
    data = [{"x": torch.randn(8, 16), "t": torch.randint(0, 4, (8,))} for _ in range(5)]
    seen: list[int] = []

    def arm_after_first(batch: Any, out: Any) -> None:
        seen.append(len(seen))
        if len(seen) == 1:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        if len(seen) == 5:
            torch.cuda.set_sync_debug_mode("default")  # the final mean reads the values

    evaluator.add_metric(arm_after_first)
    try:
        means = evaluator.run(data)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert set(means) == {"val/accuracy"}
