"""IgniteEvaluator running real pytorch-ignite evaluator engines."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import IgniteExtensionsManager
from pytorch_pfn_extras.training import extensions as ext

with warnings.catch_warnings():  # torch.distributed.optim's TorchScript deprecation warnings
    warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
    from ignite.engine import (
        Engine,
        Events,
        create_supervised_evaluator,
        create_supervised_trainer,
    )
    from ignite.metrics import Accuracy, Loss

N_VAL = 10  # not a multiple of BATCH
BATCH = 4


def _loader(n: int, seed: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = torch.randint(0, 3, (n,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH)


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.grad_enabled: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.grad_enabled.append(torch.is_grad_enabled())
        out: torch.Tensor = self.linear(x)
        reporting.report({"logit_mean": out.mean()}, self)
        return out


def _engines(model: torch.nn.Module) -> tuple[Engine, Engine, torch.optim.Optimizer]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.functional.cross_entropy)
    evaluator = create_supervised_evaluator(
        model,
        metrics={"acc": Accuracy(), "loss": Loss(torch.nn.functional.cross_entropy)},
    )
    return trainer, evaluator, optimizer


def test_engine_metrics_are_logged_as_val_keys(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Classifier()
    trainer, evaluator, optimizer = _engines(model)
    computed: list[dict[str, float]] = []
    evaluator.add_event_handler(
        Events.COMPLETED, lambda engine: computed.append(dict(engine.state.metrics))
    )
    val_loader = _loader(N_VAL, seed=1)
    manager = IgniteExtensionsManager(
        trainer,
        model,
        optimizer,
        2,
        out_dir=tmp_path,
        extensions=[ext.IgniteEvaluator(evaluator, val_loader, model), ext.LogReport()],
    )
    model.train()
    trainer.run(_loader(12, seed=2), max_epochs=2)
    log = manager.get_extension("LogReport").log
    assert len(computed) == len(log) == 2
    for entry, metrics in zip(log, computed):
        assert entry["val/acc"] == pytest.approx(metrics["acc"])
        assert entry["val/loss"] == pytest.approx(metrics["loss"])
    x, y = val_loader.dataset.tensors  # type: ignore[attr-defined]
    with torch.no_grad():
        logits = model.linear(x)
    assert log[-1]["val/loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)))
    assert log[-1]["val/acc"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    # The model's own reports, weighted by batch size, under the evaluator's name.
    assert log[-1]["validation/main/logit_mean"] == pytest.approx(float(logits.mean()))
    assert model.training
    assert not any(model.grad_enabled[-3:])


def test_hook_metrics_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    model = Classifier().train()
    _, evaluator, _ = _engines(model)
    hooked: list[bool] = []
    lasts: list[tuple[int, bool]] = []

    def metric(batch: Any, outputs: Any, last_iteration: bool) -> dict[str, Any]:
        lasts.append((len(batch[0]), last_iteration))
        y_pred, y = outputs
        return {"val/top1": (y_pred.argmax(1) == y).float().mean()}

    extension = ext.IgniteEvaluator(
        evaluator,
        _loader(N_VAL, seed=1),
        model,
        eval_hook=lambda e: hooked.append(model.training),
        metrics=[metric],
        progress_bar=True,
    )
    for _ in range(2):
        result = extension()
        assert result["val/top1"] == pytest.approx(result["val/acc"])
    assert hooked == [False, False]
    assert lasts == [(4, False), (4, False), (2, True)] * 2
    assert model.training
    assert "100.00% 3/3 iterations" in capsys.readouterr().out.splitlines()[-1]


def test_running_the_engine_outside_the_extension_collects_nothing() -> None:
    model = Classifier()
    _, evaluator, _ = _engines(model)
    extension = ext.IgniteEvaluator(evaluator, _loader(N_VAL, seed=1), model)
    evaluator.run(_loader(N_VAL, seed=1))
    assert set(extension()) == {"val/acc", "val/loss", "main/logit_mean"}


def test_bad_arguments() -> None:
    model = Classifier()
    _, evaluator, _ = _engines(model)
    with pytest.raises(TypeError, match=r"needs an ignite\.engine\.Engine as evaluator, got str"):
        ext.IgniteEvaluator("engine", [], model)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="eval_func"):
        ext.IgniteEvaluator(evaluator, [], model, eval_func=lambda x: x)  # type: ignore[call-arg]
