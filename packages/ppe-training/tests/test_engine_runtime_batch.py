"""Custom runtimes written for PPE get the step's batch in ``train_post_step`` and
``eval_post_step``, through a real trainer and evaluator run."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.runtime


class BatchRecordingRuntime(ppe.runtime.PyTorchRuntime):
    """A PPE-style custom runtime: PyTorch on the CPU, recording what each callback gets."""

    def __init__(self, device_spec: Any, options: Any) -> None:
        super().__init__(device_spec, options)
        self.events: list[tuple[str, int, Any, Any]] = []

    def train_pre_step(self, trainer: Any, module: Any, batch_idx: int, batch: Any) -> None:
        self.events.append(("train_pre_step", batch_idx, batch, None))

    def train_post_step(
        self, trainer: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        assert trainer is not None
        self.events.append(("train_post_step", batch_idx, batch, outs))

    def eval_pre_step(self, evaluator: Any, module: Any, batch_idx: int, batch: Any) -> None:
        self.events.append(("eval_pre_step", batch_idx, batch, None))

    def eval_post_step(
        self, evaluator: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        assert evaluator is not None
        self.events.append(("eval_post_step", batch_idx, batch, outs))


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": F.mse_loss(self.linear(x), t)}


def batches(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 2, generator=g)
    return [{"x": xi, "t": xi.sum(1, keepdim=True)} for xi in x]


@pytest.mark.parametrize("logic", [ppe.handler.Logic, ppe.handler.CodeBlockLogic])
def test_post_step_callbacks_get_the_batch_of_the_step(tmp_path: Any, logic: Any) -> None:
    model = Model()
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        1,
        out_dir=str(tmp_path),
        logic=logic(),
        evaluator=ppe.engine.create_evaluator(model, logic=logic()),
    )
    ppe.runtime.to(model, "cpu", runtime_class=BatchRecordingRuntime)
    runtime = ppe.runtime.get_runtime(model)
    assert isinstance(runtime, BatchRecordingRuntime)
    train, val = batches(3, 0), batches(2, 1)
    trainer.run(train, val)

    posts = [event for event in runtime.events if event[0].endswith("post_step")]
    assert [(kind, idx) for kind, idx, _, _ in posts] == [
        ("train_post_step", 0),
        ("train_post_step", 1),
        ("train_post_step", 2),
        ("eval_post_step", 0),
        ("eval_post_step", 1),
    ]
    for kind, idx, batch, outs in posts:
        expected = (train if kind.startswith("train") else val)[idx]
        assert batch is expected  # the loader's batch, the same object the pre-step got
        assert isinstance(outs["loss"], torch.Tensor)
    pres = {
        (kind.split("_")[0], idx): batch
        for kind, idx, batch, _ in runtime.events
        if kind.endswith("pre_step")
    }
    assert len(pres) == len(posts)
    for kind, idx, batch, _ in posts:
        assert pres[(kind.split("_")[0], idx)] is batch
