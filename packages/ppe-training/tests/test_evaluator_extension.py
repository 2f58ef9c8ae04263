"""Evaluator: evaluation under a real ExtensionsManager, reported means, modes and errors."""

from __future__ import annotations

import collections
import io
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import PRIORITY_WRITER, ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext
from pytorch_pfn_extras.training._batch import batch_size_of
from pytorch_pfn_extras.training.extensions.evaluator import (
    Evaluator,
    IgniteEvaluator,
    IterationStatus,
)

N_VAL = 10  # not a multiple of BATCH: the last batch is smaller
BATCH = 4
ITERS_PER_EPOCH = 3


class Regressor(torch.nn.Module):
    """Reports ``val/loss`` (no observer) and ``loss`` (as its own observer)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.calls: list[tuple[bool, bool]] = []  # (grad enabled, training) per call

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls.append((torch.is_grad_enabled(), self.training))
        out: torch.Tensor = self.linear(x)
        loss = torch.nn.functional.mse_loss(out, y)
        reporting.report({"val/loss": loss})
        reporting.report({"loss": loss}, self)
        return out


def _val_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(3)
    return TensorDataset(
        torch.randn(N_VAL, 3, generator=generator), torch.randn(N_VAL, 1, generator=generator)
    )


def _train(
    tmp_path: Path,
    model: Regressor,
    evaluator: Any,
    *,
    max_epochs: int = 2,
) -> ExtensionsManager:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(
        model, optimizer, max_epochs, iters_per_epoch=ITERS_PER_EPOCH, out_dir=tmp_path
    )
    manager.extend(evaluator)
    manager.extend(ext.LogReport())
    x, y = torch.randn(6, 3), torch.randn(6, 1)
    while not manager.stop_trigger:
        with manager.run_iteration():
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model.linear(x), y).backward()
            optimizer.step()
    return manager


def _whole_set_loss(model: Regressor, data: TensorDataset) -> float:
    x, y = data.tensors
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model.linear(x), y))


def test_logged_loss_is_the_mean_over_all_samples_not_over_batches(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Regressor()
    data = _val_data()
    loader = DataLoader(data, batch_size=BATCH)
    manager = _train(tmp_path, model, Evaluator(loader, model))
    log = manager.get_extension("LogReport").log
    assert [entry["epoch"] for entry in log] == [1, 2]
    expected = _whole_set_loss(model, data)  # the last evaluation saw the final model
    assert log[-1]["val/loss"] == pytest.approx(expected)
    assert log[-1]["validation/main/loss"] == pytest.approx(expected)
    x, y = data.tensors
    with torch.no_grad():
        per_batch = [
            float(torch.nn.functional.mse_loss(model.linear(x[i : i + BATCH]), y[i : i + BATCH]))
            for i in range(0, N_VAL, BATCH)
        ]
    assert sum(per_batch) / len(per_batch) != pytest.approx(expected)  # PPE's mean differs


def test_evaluation_runs_without_grad_in_eval_mode_and_restores_train_mode(
    tmp_path: Path,
) -> None:
    model = Regressor()
    model.train()
    _train(tmp_path, model, Evaluator(DataLoader(_val_data(), batch_size=BATCH), model))
    assert len(model.calls) == 2 * 3  # two evaluations of three batches
    assert set(model.calls) == {(False, False)}
    assert model.training and model.linear.training


def test_submodule_modes_are_restored_one_by_one() -> None:
    model = Regressor()
    model.train()
    frozen = torch.nn.BatchNorm1d(1).eval()
    model.add_module("frozen", frozen)
    Evaluator(DataLoader(_val_data(), batch_size=BATCH), model)()
    assert (model.training, model.linear.training, frozen.training) == (True, True, False)


def test_modes_are_restored_when_evaluation_raises() -> None:
    model = Regressor().train()

    def failing(x: torch.Tensor, y: torch.Tensor) -> None:
        assert not model.training
        raise RuntimeError("boom")

    evaluator = Evaluator([(torch.zeros(2, 3), torch.zeros(2, 1))], model, eval_func=failing)
    with pytest.raises(RuntimeError, match="boom"):
        evaluator()
    assert model.training and model.linear.training


def test_metrics_get_batch_outputs_and_last_iteration(tmp_path: Path) -> None:
    model = Regressor()
    seen: list[tuple[int, tuple[int, ...], bool]] = []

    def record(batch: Any, outputs: Any, last_iteration: bool) -> None:
        seen.append((len(batch[0]), tuple(outputs.shape), last_iteration))

    def mean_abs(batch: Any, outputs: torch.Tensor, last_iteration: bool) -> dict[str, Any]:
        return {"val/abs": outputs.abs().mean()}

    evaluator = Evaluator(
        DataLoader(_val_data(), batch_size=BATCH), model, metrics=[record, mean_abs]
    )
    calls: list[bool] = []
    evaluator.add_metric(lambda batch, outputs, last: calls.append(last))
    manager = _train(tmp_path, model, evaluator, max_epochs=1)
    assert seen == [(4, (4, 1), False), (4, (4, 1), False), (2, (2, 1), True)]
    assert calls == [False, False, True]
    x, _ = _val_data().tensors
    with torch.no_grad():
        expected = float(model.linear(x).abs().mean())
    assert manager.get_extension("LogReport").log[-1]["val/abs"] == pytest.approx(expected)


def test_last_iteration_is_known_without_len() -> None:
    class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
        def __iter__(self) -> Any:
            return iter(_val_data())

    loader = DataLoader(Stream(), batch_size=BATCH)
    lasts: list[bool] = []
    evaluator = Evaluator(
        loader, Regressor(), metrics=[lambda batch, outputs, last: lasts.append(last)]
    )
    evaluator()
    assert lasts == [False, False, True]
    assert evaluator.status is not None
    assert (evaluator.status.current_position, evaluator.status.size) == (3, None)


def test_eval_hook_is_called_once_per_evaluation_in_eval_mode(tmp_path: Path) -> None:
    model = Regressor()
    hooked: list[tuple[Evaluator, bool, int]] = []
    evaluator = Evaluator(
        DataLoader(_val_data(), batch_size=BATCH),
        model,
        eval_hook=lambda e: hooked.append((e, model.training, len(model.calls))),
    )
    _train(tmp_path, model, evaluator, max_epochs=2)
    assert hooked == [(evaluator, False, 0), (evaluator, False, 3)]


def test_extension_defaults() -> None:
    evaluator = Evaluator([], Regressor())
    assert evaluator.trigger == (1, "epoch")
    assert evaluator.priority == PRIORITY_WRITER
    assert evaluator.default_name == "validation"
    assert ext.Evaluator is Evaluator
    assert ext.IgniteEvaluator is IgniteEvaluator


def test_the_extension_name_prefixes_observer_keys(tmp_path: Path) -> None:
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=1, out_dir=tmp_path)
    manager.extend(Evaluator([(torch.ones(2, 3), torch.ones(2, 1))], model), name="val")
    with manager.run_iteration():
        pass
    assert set(manager.observation) == {"val/loss", "val/main/loss"}


def test_called_alone_it_returns_the_result() -> None:
    model = Regressor()
    evaluator = Evaluator(DataLoader(_val_data(), batch_size=BATCH), model)
    result = evaluator()
    expected = _whole_set_loss(model, _val_data())
    assert result == {"val/loss": pytest.approx(expected), "main/loss": pytest.approx(expected)}


def test_dict_iterators_and_targets_with_eval_func() -> None:
    models = {"main": Regressor(), "other": Regressor()}
    batches = [{"x": torch.ones(3, 3), "y": torch.zeros(3, 1)}]
    loaders = {"main": batches, "extra": [batches[0], batches[0]]}

    def eval_func(x: torch.Tensor, y: torch.Tensor) -> None:
        for model in models.values():
            reporting.report({"loss": torch.nn.functional.mse_loss(model.linear(x), y)}, model)

    evaluator = Evaluator(loaders, models, eval_func=eval_func)
    assert evaluator.get_iterator("extra") is loaders["extra"]
    assert evaluator.get_all_iterators() == loaders
    assert evaluator.get_target("other") is models["other"]
    assert evaluator.get_all_targets() == models
    result = evaluator()
    assert set(result) == {"main/loss", "other/loss"}
    x, y = batches[0]["x"], batches[0]["y"]
    for name, model in models.items():
        with torch.no_grad():
            expected = float(torch.nn.functional.mse_loss(model.linear(x), y))
        assert result[f"{name}/loss"] == pytest.approx(expected)


def test_batches_are_passed_as_keyword_positional_or_single_arguments() -> None:
    received: list[Any] = []

    def eval_func(*args: Any, **kwargs: Any) -> None:
        received.append((len(args), sorted(kwargs)))

    batches: list[Any] = [{"a": 1, "b": 2}, (1, 2, 3), [1, 2], torch.zeros(2)]
    Evaluator(batches, Regressor(), eval_func=eval_func)()
    assert received == [(0, ["a", "b"]), (3, []), (2, []), (1, [])]


def test_observations_stay_tensors_until_the_mean() -> None:
    seen: list[Any] = []

    def eval_func(x: torch.Tensor) -> None:
        reporting.report({"value": x.sum(), "note": "text", "image": torch.zeros(2, 2)})
        seen.append(reporting.get_current_reporter().observation["value"])

    result = Evaluator([torch.ones(2), torch.ones(4)], Regressor(), eval_func=eval_func)()
    assert all(isinstance(value, torch.Tensor) for value in seen)
    assert result == {"value": pytest.approx((2 * 2 + 4 * 4) / 6)}


def test_user_weights_are_kept() -> None:
    def eval_func(x: torch.Tensor) -> None:
        reporting.report({"acc": (x.mean(), 1)})

    result = Evaluator([torch.zeros(8), torch.ones(2)], Regressor(), eval_func=eval_func)()
    assert result == {"acc": pytest.approx(0.5)}


def test_progress_bar_prints_progress(capsys: pytest.CaptureFixture[str]) -> None:
    Evaluator(DataLoader(_val_data(), batch_size=BATCH), Regressor(), progress_bar=True)()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("validation [")
    assert "100.00% 3/3 iterations" in lines[-1]


def test_progress_bar_counts_without_len(capsys: pytest.CaptureFixture[str]) -> None:
    batches = iter([(torch.ones(2, 3), torch.ones(2, 1))] * 5)
    Evaluator(batches, Regressor(), progress_bar=True)()
    assert capsys.readouterr().out.splitlines()[-1].startswith("validation: 5 iterations, ")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_redraws_in_place_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    Evaluator(DataLoader(_val_data(), batch_size=BATCH), Regressor(), progress_bar=True)()
    # Drawn by util.ProgressBar: clear below the cursor, the line, back up (the last stays).
    first, *drawings = terminal.getvalue().split("\x1b[J")
    assert first == "" and drawings
    assert all(d.endswith("\n\x1b[1A") and d.count("\n") == 1 for d in drawings[:-1])
    assert drawings[-1].endswith("\n") and drawings[-1].count("\n") == 1
    assert "\x1b[" not in drawings[-1]
    assert "100.00% 3/3 iterations" in drawings[-1]


def test_iteration_status() -> None:
    status = IterationStatus(4)
    status.current_position = 3
    assert (status.epoch_detail, status.is_last) == (0.75, False)
    assert IterationStatus(None).epoch_detail is None


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((42, torch.nn.Linear(1, 1)), {}, TypeError, "iterator must be .* got int"),
        (("data", torch.nn.Linear(1, 1)), {}, TypeError, "got str"),
        (([], "model"), {}, TypeError, r"target must be a torch\.nn\.Module .* got str"),
        (({"main": 3}, torch.nn.Linear(1, 1)), {}, TypeError, r"iterator\['main'\] .* got int"),
        (([], {}), {}, ValueError, "empty dict"),
        (([], {"a": torch.nn.Linear(1, 1)}), {}, ValueError, r"targets are \['a'\]"),
        (([], torch.nn.Linear(1, 1)), {"eval_hook": 3}, TypeError, "eval_hook must be callable"),
        (([], torch.nn.Linear(1, 1)), {"metrics": [3]}, TypeError, "metric must be a callable"),
        (([], torch.nn.Linear(1, 1)), {"device": "cpu"}, TypeError, "device"),
    ],
)
def test_bad_arguments_give_clear_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Evaluator(*args, **kwargs)


def test_unknown_names_list_the_known_ones() -> None:
    evaluator = Evaluator({"extra": []}, Regressor())
    with pytest.raises(KeyError, match=r"no iterator named 'main'; it has \['extra'\]"):
        evaluator()
    with pytest.raises(KeyError, match=r"no target named 'x'; it has \['main'\]"):
        evaluator.get_target("x")


def test_a_metric_returning_a_non_dict_is_an_error() -> None:
    evaluator = Evaluator([torch.ones(1)], Regressor(), eval_func=lambda x: x)

    def not_a_dict(batch: Any, outputs: Any, last_iteration: bool) -> Any:
        return 0.5

    evaluator.add_metric(not_a_dict)
    with pytest.raises(TypeError, match="returned a float"):
        evaluator()


Pair = collections.namedtuple("Pair", ["x", "y"])


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (torch.zeros(5, 2), 5),
        (np.zeros((7,)), 7),
        ({"label": "a", "x": torch.zeros(3)}, 3),
        ([torch.tensor(1.0), ("text", np.zeros((4, 2)))], 4),
        (Pair(x=[torch.zeros(6, 1)], y=torch.zeros(2)), 6),
        (torch.tensor(1.0), None),
        ({"a": [1, 2, 3]}, None),
        ("text", None),
        ([], None),
    ],
)
def test_batch_size_of(batch: Any, expected: int | None) -> None:
    assert batch_size_of(batch) == expected


def test_a_subclass_overriding_eval_func_evaluates_each_batch() -> None:
    class Doubling(Evaluator):
        def eval_func(self, x: torch.Tensor) -> None:
            reporting.report({"double": x.sum() * 2})

    # No 'main' target: the override evaluates the batches.
    result = Doubling([torch.ones(2), torch.ones(2)], {"net": torch.nn.Linear(1, 1)})()
    assert result == {"double": pytest.approx(4.0)}


def test_eval_func_calls_the_given_function_or_the_main_target() -> None:
    model = Regressor()
    x, y = torch.ones(2, 3), torch.zeros(2, 1)
    assert Evaluator([], model, eval_func=lambda x, y: "given").eval_func(x, y=y) == "given"
    with torch.no_grad():
        assert torch.equal(Evaluator([], model).eval_func(x, y=y), model.linear(x))


def test_options_pass_through_kwargs_as_in_ppe(capsys: pytest.CaptureFixture[str]) -> None:
    class PPEStyle(Evaluator):
        def __init__(self, iterator: Any, target: Any, **kwargs: Any) -> None:
            super().__init__(iterator, target, **kwargs)

    seen: list[bool] = []
    options = {"progress_bar": True, "metrics": [lambda batch, out, last: seen.append(last)]}
    PPEStyle([torch.ones(2), torch.ones(2)], Regressor(), eval_func=lambda x: None, **options)()
    assert seen == [False, True]
    assert "2/2 iterations" in capsys.readouterr().out
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['device'\]"):
        PPEStyle([], Regressor(), device="cpu")
