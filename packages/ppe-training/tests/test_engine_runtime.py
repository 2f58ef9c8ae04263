"""A custom runtime for a new device name, driven by the trainer and evaluator."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.reporting
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training

calls: list[str] = []


class RecordingRuntime(ppe.runtime.BaseRuntime):
    """Runs on the CPU and records every callback the engine calls."""

    def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
        calls.append("move_module")
        return module

    def move_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def convert_batch(self, args: Any) -> Any:
        calls.append("convert_batch")
        return args

    def initialize_module(self, module: Any, loader_or_batch: Any, optimizer: Any = None) -> None:
        calls.append(
            "initialize_module(optimizer)" if optimizer is not None else "initialize_module"
        )

    def train_epoch_begin(self, module: torch.nn.Module) -> None:
        calls.append("train_epoch_begin")

    def train_epoch_end(self, module: torch.nn.Module) -> None:
        calls.append("train_epoch_end")

    def train_pre_step(self, trainer: Any, module: Any, batch_idx: int, batch: Any) -> None:
        calls.append(f"train_pre_step({batch_idx})")

    def train_post_step(
        self, trainer: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        assert isinstance(outs["loss"], torch.Tensor)
        calls.append(f"train_post_step({batch_idx})")

    def train_validation_begin(self, module: torch.nn.Module) -> None:
        calls.append("train_validation_begin")

    def train_validation_end(self, module: torch.nn.Module) -> None:
        calls.append("train_validation_end")

    def eval_pre_step(self, evaluator: Any, module: Any, batch_idx: int, batch: Any) -> None:
        calls.append(f"eval_pre_step({batch_idx})")

    def eval_post_step(
        self, evaluator: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        calls.append(f"eval_post_step({batch_idx})")

    def train_cleanup(self, module: torch.nn.Module) -> None:
        calls.append("train_cleanup")

    def execute(self, code_block: Any, batch: Any) -> Any:
        calls.append("execute")
        for optimizer in code_block.optimizers:
            optimizer.zero_grad()
        outs = code_block.func(**batch)
        if code_block.backprop:
            outs["loss"].backward()
            for optimizer in code_block.optimizers:
                optimizer.step()
        return outs


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        loss = F.mse_loss(self.linear(x), t)
        ppe.reporting.report({("train" if self.training else "val") + "/loss": loss})
        return {"loss": loss}


def data(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 4, 2, generator=g)
    return [{"x": xi, "t": xi.sum(1, keepdim=True)} for xi in x]


@pytest.mark.parametrize("codeblocks", [False, True])
def test_custom_runtime_callbacks_are_called_in_order(tmp_path: Any, codeblocks: bool) -> None:
    ppe.runtime.runtime_registry.register("recording_device", RecordingRuntime)
    calls.clear()
    model = Model()
    logic = ppe.handler.CodeBlockLogic if codeblocks else ppe.handler.Logic
    log = ppe.training.extensions.LogReport()
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        2,
        device="recording_device",
        logic=logic(),
        out_dir=str(tmp_path),
        extensions=[log],
        evaluator=ppe.engine.create_evaluator(model, device="recording_device", logic=logic()),
    )
    assert isinstance(trainer.handler.entry_runtime, RecordingRuntime)
    ppe.runtime.to(model, "recording_device:0")
    assert isinstance(model._ppe_runtime, RecordingRuntime)
    trainer.run(data(2), data(1))

    step = ["execute"] if codeblocks else []
    epoch = [
        "train_epoch_begin",
        *(
            call
            for i in range(2)
            for call in (f"train_pre_step({i})", "convert_batch", *step, f"train_post_step({i})")
        ),
        "train_validation_begin",
    ]
    validation = [
        "eval_pre_step(0)",
        "convert_batch",
        *step,
        "eval_post_step(0)",
        "train_validation_end",
    ]
    assert calls == [
        "move_module",
        "initialize_module(optimizer)",
        *epoch,
        "initialize_module",  # the evaluator's setup, at its first run
        *validation,
        "train_epoch_end",
        *epoch,
        *validation,
        "train_epoch_end",
        "train_cleanup",
    ]
    assert [entry["epoch"] for entry in log.log] == [1, 2]
    assert log.log[1]["train/loss"] < log.log[0]["train/loss"]  # it trained through the runtime
