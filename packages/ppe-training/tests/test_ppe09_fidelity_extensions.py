"""Extensions that behave as PPE 0.9's do (issue 24, part 3), written as PPE user code."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras.training import extensions
from pytorch_pfn_extras.training.extensions.variable_statistics_plot import (
    Statistician,
    percentile,
)

SIGMAS = (0, 0.13, 2.28, 15.87, 50, 84.13, 97.72, 99.87, 100)


def _manager(tmp_path: Path, *exts: Any, epochs: int = 2, iters: int = 2, **kw: Any) -> Any:
    manager = ppe.training.ExtensionsManager(
        {}, kw.pop("optimizers", {}), epochs, iters_per_epoch=iters, out_dir=str(tmp_path), **kw
    )
    for ext in exts:
        extension, trigger = ext if isinstance(ext, tuple) else (ext, None)
        manager.extend(extension, trigger=trigger)
    return manager


# --- Evaluator(target={}) with an eval_func --------------------------------------------------


def test_evaluator_with_an_empty_target_dict_evaluates_with_its_eval_func(tmp_path: Path) -> None:
    batches = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]
    seen: list[list[float]] = []

    def eval_func(x: torch.Tensor) -> None:
        seen.append(x.tolist())
        ppe.reporting.report({"val/sum": x.sum()})

    log = extensions.LogReport()
    manager = _manager(tmp_path, extensions.Evaluator(batches, {}, eval_func=eval_func), log)
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
    assert seen == [[1.0, 2.0], [3.0, 4.0]] * 2
    assert [entry["val/sum"] for entry in log.log] == [5.0, 5.0]  # (3 + 7) / 2 per epoch


def test_evaluator_subclass_with_its_own_eval_func_accepts_an_empty_target_dict() -> None:
    class Doubling(extensions.Evaluator):
        def eval_func(self, x: torch.Tensor) -> None:
            ppe.reporting.report({"val/double": 2 * x.sum()})

    reporter = ppe.reporting.Reporter()
    with reporter, reporter.scope({}):
        result = Doubling([torch.tensor([1.0]), torch.tensor([2.0])], {})()
    assert float(result["val/double"]) == 3.0


def test_evaluator_with_an_empty_target_dict_and_no_eval_func_is_an_error() -> None:
    with pytest.raises(ValueError, match="target is an empty dict"):
        extensions.Evaluator([torch.zeros(1)], {})


# --- BestValue / MinValue / MaxValue state in 0.9's layout -----------------------------------

# Two iterations per epoch: the epoch means are 2, 5, 1.
SCORES = [1.0, 3.0, 4.0, 6.0, 0.0, 2.0]


def _score_run(tmp_path: Path, best: Any, iterations: int, start: int = 0) -> Any:
    manager = _manager(tmp_path, best, epochs=3)
    manager.iteration = start
    while manager.iteration < iterations:
        with manager.run_iteration():
            ppe.reporting.report({"score": SCORES[manager.iteration]})
    return manager


def test_best_value_state_dict_has_ppe09s_layout(tmp_path: Path) -> None:
    best = extensions.MaxValue("score")
    _score_run(tmp_path, best, iterations=5)  # epochs 1 and 2 done, one value of epoch 3
    state = best.state_dict()
    assert set(state) == {"_best_trigger", "_best_it", "_best_epoch"}
    assert (state["_best_it"], state["_best_epoch"]) == (4, 2)
    trigger_state = state["_best_trigger"]
    assert set(trigger_state) == {"_best_value", "_summary", "interval_trigger"}
    assert trigger_state["_best_value"] == 5.0
    assert trigger_state["_summary"] == {"score": {"_x": 0.0, "_x2": 0.0, "_n": 1.0}}
    assert trigger_state["interval_trigger"] == {}


def test_best_value_loads_a_state_as_ppe09_writes_it(tmp_path: Path) -> None:
    # What 0.9's MinValue("score") holds after iteration 5 of SCORES: best 1 is not reached
    # yet; epoch 1's mean 2 is the best, one value (0) of epoch 3 is pending.
    ppe09_state = {
        "_best_trigger": {
            "interval_trigger": {},
            "_summary": {"score": {"_x": 0.0, "_x2": 0.0, "_n": 1.0}},
            "_best_value": 2.0,
        },
        "_best_it": 2,
        "_best_epoch": 1,
    }
    best = extensions.MinValue("score")
    best.load_state_dict(ppe09_state)
    assert (best.best_value, best.best_epoch, best.best_iteration) == (2.0, 1, 2)
    _score_run(tmp_path, best, iterations=6, start=5)
    # Epoch 3's mean is (0 + 2) / 2 = 1 only if the pending 0 was loaded.
    assert (best.best_value, best.best_epoch, best.best_iteration) == (1.0, 3, 6)
    assert best.state_dict()["_best_trigger"]["_best_value"] == 1.0


def test_best_value_still_loads_the_layout_our_earlier_releases_wrote(tmp_path: Path) -> None:
    earlier_state = {
        "best_trigger": {
            "best_value": 2.0,
            "summary": {"score": {"_x": 0.0, "_x2": 0.0, "_n": 1.0}},
            "interval_trigger": {},
        },
        "best_epoch": 1,
        "best_iteration": 2,
    }
    best = extensions.MinValue("score")
    best.load_state_dict(earlier_state)
    _score_run(tmp_path, best, iterations=6, start=5)
    assert (best.best_value, best.best_epoch, best.best_iteration) == (1.0, 3, 6)


def test_best_value_round_trips_through_a_snapshot_file(tmp_path: Path) -> None:
    best = extensions.MaxValue("score")
    _score_run(tmp_path, best, iterations=5)
    torch.save(best.state_dict(), tmp_path / "best.pt")
    loaded = extensions.MaxValue("score")
    loaded.load_state_dict(torch.load(tmp_path / "best.pt", weights_only=True))
    assert loaded.state_dict() == best.state_dict()


def test_best_value_state_of_another_layout_names_its_keys() -> None:
    with pytest.raises(KeyError, match=r"'_best_trigger'.*\['best'\]"):
        extensions.MaxValue("score").load_state_dict({"best": 1.0})


# --- Statistician on tensors ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_statistician_takes_a_tensor_and_a_torch_dtype_and_returns_tensors(
    dtype: torch.dtype,
) -> None:
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    stats = Statistician(True, True, SIGMAS)(x, axis=0, dtype=dtype)
    assert set(stats) == {"mean", "std", "percentile"}
    assert all(isinstance(v, torch.Tensor) and v.dtype == dtype for v in stats.values())
    assert stats["percentile"].shape == (len(SIGMAS), 3)
    expected = x.double().numpy()
    rtol = 1e-6 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(stats["mean"], expected.mean(axis=0), rtol=rtol)
    np.testing.assert_allclose(stats["std"], expected.std(axis=0), rtol=rtol)
    np.testing.assert_allclose(
        stats["percentile"], np.percentile(expected, SIGMAS, axis=0), rtol=rtol
    )


def test_statistician_computes_in_float64_by_default_and_reduces_all_axes() -> None:
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    stats = Statistician(True, False, (50,))(x, axis=None)
    assert stats["mean"].dtype == torch.float64
    assert stats["mean"].item() == 5.5
    assert stats["percentile"].tolist() == [5.5]


def test_percentile_of_a_tensor_is_a_tensor_like_numpys() -> None:
    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0], [5.0, 6.0]])
    got = percentile(x, [25, 50], axis=0)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got, np.percentile(x.numpy(), [25, 50], axis=0))
    assert percentile(x[:, 0], 50, axis=0).item() == 3.0


@pytest.mark.gpu
def test_statistician_computes_on_the_device_of_a_cuda_tensor() -> None:
    x = torch.randn(1000, 3, generator=torch.Generator().manual_seed(0))
    x[5, 2] = float("nan")
    stats = Statistician(True, True, SIGMAS)(x.cuda(), axis=0, dtype=torch.float32)
    assert all(v.device.type == "cuda" and v.dtype == torch.float32 for v in stats.values())
    expected = x.double().numpy()
    got = stats["percentile"].cpu()
    np.testing.assert_allclose(got[:, :2], np.percentile(expected[:, :2], SIGMAS, axis=0), 1e-6)
    assert got[:, 2].isnan().all()  # NumPy's answer for a column holding a NaN
    np.testing.assert_allclose(stats["std"].cpu()[:2], expected[:, :2].std(axis=0), rtol=1e-5)


@pytest.mark.gpu
def test_variable_statistics_plot_of_a_cuda_model_equals_the_cpu_ones() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    model(x).square().sum().backward()
    expected = extensions.VariableStatisticsPlot(model).statistics()
    model.cuda()
    got = extensions.VariableStatisticsPlot(model).statistics()
    for kind in ("data", "grad"):
        for name in ("mean", "std", "percentile"):
            np.testing.assert_allclose(got[kind][name], expected[kind][name], rtol=1e-5, atol=1e-7)


# --- LRScheduler ------------------------------------------------------------------------------


def _sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def test_plateau_stepped_by_a_key_not_reported_raises_value_error_naming_it(
    tmp_path: Path,
) -> None:
    optimizer = _sgd()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    stepper = extensions.LRScheduler.step_by_value("val/accuracy")
    manager = _manager(
        tmp_path, (extensions.LRScheduler(plateau, stepper=stepper), (1, "iteration"))
    )
    missing = pytest.raises(ValueError, match=r"'val/accuracy'.*reported: \['val/loss'\]")
    with missing, manager.run_iteration():
        optimizer.step()
        ppe.reporting.report({"val/loss": 1.0})


class _OwnScheduler:
    """A scheduler written by a user: not torch's, its optimizer's step is not counted."""

    def __init__(self, optimizer: Any = None) -> None:
        if optimizer is not None:
            self.optimizer = optimizer
        self.steps = 0

    def step(self) -> None:
        self.steps += 1


@pytest.mark.parametrize("optimizer", [None, "plain"])
def test_wait_for_first_optimizer_step_never_holds_back_a_users_scheduler(
    tmp_path: Path, optimizer: Any
) -> None:
    scheduler = _OwnScheduler(_sgd() if optimizer else None)
    lr_scheduler = extensions.LRScheduler(scheduler, wait_for_first_optimizer_step=True)
    manager = _manager(tmp_path, (lr_scheduler, (1, "iteration")))
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass  # no optimizer step at all
    assert scheduler.steps == 4


def test_wait_for_first_optimizer_step_holds_back_a_torch_scheduler(tmp_path: Path) -> None:
    optimizer = _sgd()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    lr_scheduler = extensions.LRScheduler(scheduler, wait_for_first_optimizer_step=True)
    manager = _manager(tmp_path, (lr_scheduler, (1, "iteration")), epochs=3)
    while not manager.stop_trigger:
        with manager.run_iteration():
            if manager.iteration >= 3:  # the optimizer steps from the 4th iteration on
                optimizer.step()
    assert scheduler.last_epoch == 3  # iterations 4, 5, 6


# --- PrintReport without entries --------------------------------------------------------------


def _printed_header(tmp_path: Path, log_trigger: Any, values: Any = None) -> list[list[str]]:
    out = io.StringIO()
    manager = _manager(
        tmp_path,
        extensions.LogReport(trigger=log_trigger),
        extensions.PrintReport(out=out),
        iters=2,
    )
    while not manager.stop_trigger:
        with manager.run_iteration():
            i = manager.iteration + 1
            ppe.reporting.report(values(i) if values else {"zeta": 1.0, "alpha": float(i)})
    return [line.split() for line in out.getvalue().splitlines() if "elapsed_time" in line]


@pytest.mark.parametrize(
    ("log_trigger", "unit"), [((1, "epoch"), "epoch"), ((1, "iteration"), "iteration")]
)
def test_print_report_shows_the_log_report_unit_first_keys_as_seen_elapsed_time_last(
    tmp_path: Path, log_trigger: Any, unit: str
) -> None:
    (header,) = _printed_header(tmp_path, log_trigger)
    assert header == [unit, "zeta", "alpha", "elapsed_time"]


def test_print_report_adds_a_later_key_after_those_seen_before(tmp_path: Path) -> None:
    def values(i: int) -> dict[str, float]:
        return {"b": 1.0} if i <= 2 else {"c": 2.0, "a": 3.0, "b": 1.0}

    headers = _printed_header(tmp_path, (1, "epoch"), values)
    assert headers == [["epoch", "b", "elapsed_time"], ["epoch", "b", "c", "a", "elapsed_time"]]


def test_print_report_of_a_log_trigger_without_unit_shows_no_counter(tmp_path: Path) -> None:
    every_second = ppe.training.triggers.ManualScheduleTrigger([2, 4], "iteration")
    assert _printed_header(tmp_path, every_second)[0][0] == "iteration"

    def callable_trigger(manager: Any) -> bool:
        return bool(manager.iteration % 2 == 0)

    (header,) = _printed_header(tmp_path / "callable", callable_trigger)
    assert header == ["zeta", "alpha", "elapsed_time"]


# --- Slack without a token --------------------------------------------------------------------


def test_slack_without_a_token_raises_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("slack_sdk")
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match=r"Slack needs a bot token.*SLACK_BOT_TOKEN"):
        extensions.Slack("experiments")
