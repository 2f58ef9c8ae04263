"""PPE's trainer examples, run as PPE 0.9 user code through the meta-package.

PPE's MNIST trainer example (the shape of the reference docs' "Trainer" page) and its
custom-logic variant, on a small synthetic data set: an evaluator with ``AccuracyMetric`` and
``eval_report_keys=["loss", "accuracy"]``, a trainer with LogReport, ProgressBar, observe_lr and
PrintReport. In 0.9 each evaluation step merges the metrics' results into its outputs before
``eval_post_step``, so ``val/accuracy`` reaches the log; PPE's custom-logic example forgets
``ppe.to`` on the CPU, which we repair with a warning.
"""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras.training import extensions


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class ModelWithLoss(torch.nn.Module):
    """The shape of PPE's MNIST trainer example: a loss and the predicted labels."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, data: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        output = self.model(data)
        loss = F.nll_loss(output, target)
        return {"loss": loss, "output": output.argmax(dim=1, keepdim=True)}


def digits(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    t = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return [{"data": a, "target": b} for a, b in zip(x, t, strict=True)]


def loaders() -> tuple[Any, Any]:
    train = torch.utils.data.DataLoader(digits(96, 0), batch_size=32, shuffle=True)
    test = torch.utils.data.DataLoader(digits(40, 1), batch_size=16)  # 16, 16 and 8
    return train, test


def expected_accuracy(model: torch.nn.Module, test_loader: Any) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in test_loader:
            pred = model(batch["data"]).argmax(dim=1)
            correct += int((pred == batch["target"]).sum())
            total += len(batch["target"])
    return correct / total


def run_trainer_example(tmp_path: Path, logic: Any = None, move: bool = True) -> tuple[Any, str]:
    """PPE's MNIST trainer example (train_mnist_trainer.py), on a small synthetic set."""
    torch.manual_seed(0)
    device = "cpu"
    model = Net()
    model_with_loss = ModelWithLoss(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    train_loader, test_loader = loaders()
    my_extensions = [
        extensions.LogReport(),
        extensions.ProgressBar(),
        extensions.observe_lr(optimizer=optimizer),
        extensions.PrintReport(
            ["epoch", "iteration", "train/loss", "lr", "val/loss", "val/accuracy"]
        ),
    ]
    evaluator = ppe.engine.create_evaluator(
        model_with_loss,
        device=device,
        progress_bar=True,
        metrics=[ppe.training.metrics.AccuracyMetric("target", "output")],
        options={"eval_report_keys": ["loss", "accuracy"]},
        logic=copy.copy(logic),
    )
    trainer = ppe.engine.create_trainer(
        model_with_loss,
        optimizer,
        3,
        device=device,
        extensions=my_extensions,
        evaluator=evaluator,
        options={"train_report_keys": ["loss"]},
        logic=logic,
        out_dir=str(tmp_path),
    )
    if move:
        ppe.to(model_with_loss, device)
    out = io.StringIO()
    with redirect_stdout(out):
        trainer.run(train_loader, test_loader)
    log = trainer.manager.get_extension("LogReport").log
    assert [entry["epoch"] for entry in log] == [1, 2, 3]
    assert log[-1]["val/accuracy"] == pytest.approx(expected_accuracy(model, test_loader))
    assert log[-1]["train/loss"] < log[0]["train/loss"]
    printed = out.getvalue()
    assert "val/accuracy" in printed.splitlines()[0] or "val/accuracy" in printed
    return trainer, printed


def test_ppe_mnist_trainer_example_reports_val_accuracy(tmp_path: Path) -> None:
    trainer, printed = run_trainer_example(tmp_path)
    log = trainer.manager.get_extension("LogReport").log
    assert all(isinstance(entry["val/accuracy"], float) for entry in log)
    header = next(line for line in printed.splitlines() if "val/accuracy" in line)
    assert header.split() == ["epoch", "iteration", "train/loss", "lr", "val/loss", "val/accuracy"]
    assert (tmp_path / "log").is_file()


class CustomLogic(ppe.handler.Logic):
    """PPE's custom-logic example: its own steps, through the public Logic API."""

    def train_step(self, models: Any, optimizers: Any, batch_idx: int, batch: Any) -> Any:
        model = models[self.model_name]
        optimizers[self.model_name].zero_grad()
        outs = model(**batch)
        outs["loss"].backward()
        return outs

    def train_step_optimizers(self, models: Any, optimizers: Any, batch_idx: int) -> None:
        optimizers[self.model_name].step()

    def eval_step(self, models: Any, batch_idx: int, batch: Any) -> Any:
        return models[self.model_name](**batch)


def test_ppe_trainer_example_with_a_custom_logic_reports_val_accuracy(tmp_path: Path) -> None:
    run_trainer_example(tmp_path, logic=CustomLogic())


def test_a_model_never_moved_with_ppe_to_is_moved_to_the_device_with_one_warning(
    tmp_path: Path,
) -> None:
    # PPE's custom-logic example forgets ppe.to on the CPU (0.9 fails there).
    with pytest.warns(UserWarning, match=r"was not moved with ppe\.to") as record:
        trainer, _ = run_trainer_example(tmp_path, logic=CustomLogic(), move=False)
    moved = [w for w in record if "was not moved with ppe.to" in str(w.message)]
    assert len(moved) == 1
    assert "moving it to 'cpu'" in str(moved[0].message)
    model = trainer.models["main"]
    assert isinstance(ppe.runtime.get_runtime(model), ppe.runtime.PyTorchRuntime)


def test_metric_results_are_reported_only_through_eval_report_keys(tmp_path: Path) -> None:
    model = ModelWithLoss(Net())
    ppe.to(model, "cpu")
    _, test_loader = loaders()
    seen: list[Any] = []

    class Spy(ppe.handler.Handler):
        def eval_post_step(self, evaluator: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
            seen.append(dict(outputs))  # the metric's result is already among the outputs
            super().eval_post_step(evaluator, batch_idx, batch, outputs)

    metric = ppe.training.metrics.AccuracyMetric("target", "output")
    quiet = ppe.engine.create_evaluator(model, metrics=[metric], options={})
    assert quiet.run(test_loader) == {}  # nothing asked for, nothing reported
    asked = ppe.engine.create_evaluator(
        model, metrics=[metric], options={"eval_report_keys": ["accuracy"]}, handler_class=Spy
    )
    means = asked.run(test_loader)
    assert set(means) == {"val/accuracy"}
    assert means["val/accuracy"] == pytest.approx(expected_accuracy(model.model, test_loader))
    assert [sorted(outputs) for outputs in seen] == [["accuracy", "loss", "output"]] * 3
    # a 0-d tensor (PPE 0.9: a float): the step does not wait for the device
    assert all(outputs["accuracy"].shape == () for outputs in seen)


def test_accuracy_metric_compares_on_the_device_of_the_outputs() -> None:
    # The evaluator hands metrics the loader's batch (on the CPU) and the model's outputs (on
    # the device): the labels follow the outputs.
    metric = ppe.training.metrics.AccuracyMetric("t", "y")
    batch = {"t": torch.tensor([0, 1, 1])}
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    on_meta = metric(batch, {"y": scores.to("meta")})["accuracy"]
    assert on_meta.device.type == "meta"
    assert metric(batch, {"y": scores})["accuracy"].item() == pytest.approx(2 / 3)
