"""ParameterStatistics, MicroAverage, BestValue/MaxValue/MinValue and FailOnNonNumber."""

from __future__ import annotations

import importlib
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

import pytorch_pfn_extras.training
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, snapshot
from pytorch_pfn_extras.training.extensions.best_value import BestValue, MaxValue, MinValue
from pytorch_pfn_extras.training.extensions.fail_on_non_number import FailOnNonNumber
from pytorch_pfn_extras.training.extensions.micro_average import MicroAverage
from pytorch_pfn_extras.training.extensions.parameter_statistics import ParameterStatistics

SIGMAS = (0.13, 2.28, 15.87, 50, 84.13, 97.72, 99.87)
DEFAULT_NAMES = ["mean", "std", "min", "max", "zeros"] + [f"percentile/{i}" for i in range(7)]


def _reference(x: np.ndarray) -> dict[str, float]:
    """The default statistics as PPE documents them, computed by NumPy."""
    x = x.astype(np.float64).ravel()
    values = [x.mean(), x.std(), x.min(), x.max(), np.count_nonzero(x == 0)]
    return dict(zip(DEFAULT_NAMES, [*values, *np.percentile(x, SIGMAS)]))


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    first, last = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    with torch.no_grad():
        first.weight[0, :2] = 0.0  # a few exact zeros
    return torch.nn.Sequential(first, torch.nn.ReLU(), last)


def _last_bias(model: torch.nn.Sequential) -> torch.Tensor:
    last = model[2]
    assert isinstance(last, torch.nn.Linear)
    return last.bias


def _manager(
    model: torch.nn.Module,
    tmp_path: Any,
    *extensions: Any,
    lr: float = 0.0,
    max_epochs: int = 2,
    iters_per_epoch: int = 3,
) -> ExtensionsManager:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    manager = ExtensionsManager(
        model, optimizer, max_epochs, iters_per_epoch=iters_per_epoch, out_dir=tmp_path
    )
    for extension in extensions:
        if isinstance(extension, tuple):
            manager.extend(extension[0], trigger=extension[1])
        else:
            manager.extend(extension)
    return manager


def _step(manager: ExtensionsManager, model: torch.nn.Module, values: dict[str, Any]) -> None:
    """One training iteration of ``model`` that also reports ``values``."""
    optimizer = manager.optimizers["main"]
    with manager.run_iteration():
        x = torch.linspace(-1, 1, 8).reshape(2, 4) + manager.iteration
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        reporting.report(values)


def _numpy(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


# --- ParameterStatistics -------------------------------------------------------------------


def test_default_statistics_equal_numpy_for_data_and_grad(tmp_path: Any) -> None:
    model = _model()
    stats = ParameterStatistics(model, trigger=(1, "iteration"))
    manager = _manager(model, tmp_path, stats)
    _step(manager, model, {})
    observation = manager.observation
    expected_keys = {
        f"{name}/{attr}/{stat}"
        for name, _ in model.named_parameters()
        for attr in ("data", "grad")
        for stat in DEFAULT_NAMES
    }
    assert set(observation) == expected_keys
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None
        for attr, tensor in (("data", parameter.detach()), ("grad", parameter.grad)):
            for stat, reference in _reference(tensor.numpy()).items():
                value = observation[f"{name}/{attr}/{stat}"]
                assert isinstance(value, torch.Tensor)  # not synchronized to a Python float
                assert _numpy(value) == pytest.approx(reference, rel=1e-6, abs=1e-7), (
                    name,
                    attr,
                    stat,
                )
    assert _numpy(observation["0.weight/data/zeros"]) == 2


@pytest.mark.parametrize("size", [1, 2, 7, 100, 10_001])
def test_percentiles_equal_numpy_percentile(tmp_path: Any, size: int) -> None:
    torch.manual_seed(size)
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.randn(size, dtype=torch.float64))
    manager = _manager(model, tmp_path, ParameterStatistics(model, trigger=(1, "iteration")))
    with manager.run_iteration():
        pass
    expected = np.percentile(model.w.detach().numpy(), SIGMAS)
    got = [_numpy(manager.observation[f"w/data/percentile/{i}"]) for i in range(7)]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert "w/grad/mean" not in manager.observation  # no gradient yet: skipped


def test_integer_parameters_get_statistics_too(tmp_path: Any) -> None:
    model = torch.nn.Module()
    model.steps = torch.nn.Parameter(torch.tensor([0, 0, 3, 5]), requires_grad=False)
    manager = _manager(model, tmp_path, ParameterStatistics(model, trigger=(1, "iteration")))
    with manager.run_iteration():
        pass
    reference = _reference(np.array([0, 0, 3, 5]))
    got = {stat: _numpy(manager.observation[f"steps/data/{stat}"]) for stat in DEFAULT_NAMES}
    assert got == pytest.approx(reference)


def test_statistics_are_those_of_the_parameters_when_the_trigger_fires(tmp_path: Any) -> None:
    model = _model()
    log = LogReport(trigger=(3, "iteration"))
    calls: list[int] = []
    stats = ParameterStatistics(model, trigger=(3, "iteration"))
    manager = _manager(model, tmp_path, stats, log, lr=0.1)
    manager.extend(lambda m: calls.append(m.iteration), name="spy", trigger=(1, "iteration"))
    seen: list[dict[str, float]] = []
    for _ in range(6):
        _step(manager, model, {})
        # The extension ran after the optimizer step: these are the values it saw.
        seen.append(_reference(_last_bias(model).detach().numpy()))
    assert [entry["iteration"] for entry in log.log] == [3, 6]
    for entry, current in zip(log.log, (seen[2], seen[5])):
        for stat in DEFAULT_NAMES:
            assert entry[f"2.bias/data/{stat}"] == pytest.approx(current[stat], rel=1e-6, abs=1e-7)
    assert seen[0]["mean"] != seen[2]["mean"]  # the parameters did change
    assert stats.trigger == (3, "iteration")  # it runs only at its trigger


def test_keys_use_prefix_and_link_names(tmp_path: Any) -> None:
    encoder, decoder = torch.nn.Linear(4, 2), torch.nn.Linear(2, 1)
    encoder.name = "encoder"  # type: ignore[assignment]
    model = torch.nn.Sequential(encoder, decoder)
    for links, names in (
        ([encoder], ["encoder/weight", "encoder/bias"]),
        ({"enc": encoder, "dec": decoder}, ["enc/weight", "enc/bias", "dec/weight", "dec/bias"]),
    ):
        stats = ParameterStatistics(
            links, statistics=["mean"], report_grads=False, prefix="stats", trigger=(1, "iteration")
        )
        manager = _manager(model, tmp_path, stats)
        _step(manager, model, {})
        assert sorted(manager.observation) == sorted(f"stats/{n}/data/mean" for n in names)


@pytest.mark.parametrize(
    ("report_params", "report_grads", "attrs"),
    [(True, False, ["data"]), (False, True, ["grad"]), (False, False, [])],
)
def test_report_params_and_report_grads_select_the_tensors(
    tmp_path: Any, report_params: bool, report_grads: bool, attrs: list[str]
) -> None:
    model = torch.nn.Linear(4, 1)
    stats = ParameterStatistics(
        model,
        statistics={"max": torch.amax},
        report_params=report_params,
        report_grads=report_grads,
        trigger=(1, "iteration"),
    )
    manager = _manager(model, tmp_path, stats)
    _step(manager, model, {})
    expected = {f"{name}/{attr}/max" for name in ("weight", "bias") for attr in attrs}
    assert set(manager.observation) == expected


def test_custom_statistics_and_multiple_values_get_indexed_keys(tmp_path: Any) -> None:
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.tensor([3.0, -1.0, 0.0, 2.0]))
    stats = ParameterStatistics(
        model,
        statistics={"l1": lambda x: x.abs().sum(), "ends": lambda x: x[[0, -1]], "n": len},
        report_grads=False,
        trigger=(1, "iteration"),
    )
    stats.register_statistics("argmax", torch.argmax)
    manager = _manager(model, tmp_path, stats)
    with manager.run_iteration():
        pass
    got = {key: _numpy(value) for key, value in manager.observation.items()}
    assert got == {
        "w/data/l1": 6.0,
        "w/data/ends/0": 3.0,
        "w/data/ends/1": 2.0,
        "w/data/n": 4.0,
        "w/data/argmax": 0.0,
    }


def test_skip_nan_params_reports_nan_for_the_tensor_with_nan_only(tmp_path: Any) -> None:
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight[1, 2] = math.nan
    stats = ParameterStatistics(model, report_grads=False, trigger=(1, "iteration"))
    stats_skip = ParameterStatistics(
        model, report_grads=False, prefix="skip", trigger=(1, "iteration"), skip_nan_params=True
    )
    manager = _manager(model, tmp_path, stats, stats_skip)
    with manager.run_iteration():
        pass
    observation = {key: _numpy(value) for key, value in manager.observation.items()}
    assert all(math.isnan(observation[f"skip/weight/data/{s}"]) for s in DEFAULT_NAMES)
    assert not math.isnan(observation["weight/data/zeros"])  # computed without skipping
    bias = _reference(model.bias.detach().numpy())
    for stat in DEFAULT_NAMES:
        assert observation[f"skip/bias/data/{stat}"] == pytest.approx(bias[stat], abs=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"statistics": ["mean", "median", "kurtosis"]}, ValueError, r"\['median', 'kurtosis'\]"),
        ({"statistics": "all"}, ValueError, "'all'"),
        ({"statistics": {"bad": 3}}, TypeError, "'bad'"),
        ({"statistics": {"": torch.mean}}, ValueError, "non-empty"),
    ],
)
def test_bad_statistics_are_rejected(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ParameterStatistics(torch.nn.Linear(1, 1), **kwargs)


def test_bad_links_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"'weight'.*distinct names"):
        ParameterStatistics([torch.nn.Linear(1, 1), torch.nn.Linear(2, 1)])
    with pytest.raises(ValueError, match="empty"):
        ParameterStatistics([])
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        ParameterStatistics([torch.nn.Linear(1, 1), "fc"])
    with pytest.raises(TypeError, match="int"):
        ParameterStatistics(3)


# --- MicroAverage --------------------------------------------------------------------------

CORRECT = [3, 0, 5, 7, 1, 2]
TOTAL = [4, 2, 10, 8, 1, 3]


@pytest.mark.parametrize("as_tensor", [False, True])
def test_micro_average_is_ratio_of_sums_over_each_epoch(tmp_path: Any, as_tensor: bool) -> None:
    model = torch.nn.Linear(4, 1)
    average = MicroAverage("correct", "total", "accuracy")
    log = LogReport()
    manager = _manager(model, tmp_path, average, log)
    for correct, total in zip(CORRECT, TOTAL):
        values: dict[str, Any] = {"correct": correct, "total": total}
        if as_tensor:
            values = {key: torch.tensor(value) for key, value in values.items()}
        _step(manager, model, values)
    assert [entry["accuracy"] for entry in log.log] == [
        pytest.approx(8 / 16),
        pytest.approx(10 / 12),
    ]
    # The micro-average is not the mean of the per-batch ratios.
    assert log.log[0]["accuracy"] != pytest.approx(np.mean([3 / 4, 0 / 2, 5 / 10]))


def test_micro_average_resumes_a_partial_interval_from_a_snapshot(tmp_path: Any) -> None:
    def run(stop: int | None, resume: bool = False) -> LogReport:
        model = torch.nn.Linear(4, 1)
        log = LogReport()
        manager = _manager(
            model,
            tmp_path,
            MicroAverage("correct", "total", "accuracy"),
            log,
            (snapshot(autoload=resume), (1, "iteration")),
        )
        while not manager.stop_trigger and (stop is None or manager.iteration < stop):
            i = manager.iteration
            _step(manager, model, {"correct": torch.tensor(CORRECT[i]), "total": TOTAL[i]})
        return log

    run(4)  # stops in the middle of the second epoch
    log = run(None, resume=True)
    assert log.log[-1]["iteration"] == 6
    assert log.log[-1]["accuracy"] == pytest.approx(10 / 12)


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"correct": torch.tensor([1, 2]), "total": 3}, "'correct'"),
        ({"correct": 1, "total": np.array([3, 4])}, "'total'"),
        ({"correct": 1, "total": "3"}, "'total'"),
    ],
)
def test_micro_average_rejects_non_scalars_naming_the_key(
    tmp_path: Any, values: dict[str, Any], key: str
) -> None:
    model = torch.nn.Linear(4, 1)
    manager = _manager(model, tmp_path, MicroAverage("correct", "total", "accuracy"))
    with pytest.raises(ValueError, match=f"{key} must be a scalar"):
        _step(manager, model, values)


def test_micro_average_rejects_bad_keys() -> None:
    with pytest.raises(ValueError, match="result_key"):
        MicroAverage("correct", "total", "")


# --- BestValue / MaxValue / MinValue -------------------------------------------------------

# Two iterations per epoch: epoch means are 2, 5, 1, 5, 3.
SCORES = [1.0, 3.0, 4.0, 6.0, 0.0, 2.0, 5.0, 5.0, 3.0, 3.0]


def _best_run(
    tmp_path: Any,
    make: Callable[[], Sequence[BestValue]],
    stop: int | None = None,
    resume: bool = False,
) -> Sequence[BestValue]:
    model = torch.nn.Linear(4, 1)
    extensions = make()
    manager = _manager(
        model,
        tmp_path,
        *extensions,
        (snapshot(autoload=resume), (1, "iteration")),
        max_epochs=5,
        iters_per_epoch=2,
    )
    while not manager.stop_trigger and (stop is None or manager.iteration < stop):
        _step(manager, model, {"score": torch.tensor(SCORES[manager.iteration])})
    return extensions


def _all_best() -> list[BestValue]:
    return [
        MaxValue("score"),
        MinValue("score"),
        BestValue("score", lambda best, new: abs(new - 4) < abs(best - 4)),
        MaxValue("score", trigger=(1, "iteration")),
    ]


def test_best_values_track_the_epoch_means(tmp_path: Any) -> None:
    maximum, minimum, closest, per_iteration = _best_run(tmp_path, _all_best)
    assert (maximum.best_value, maximum.best_epoch, maximum.best_iteration) == (5.0, 2, 4)
    assert (minimum.best_value, minimum.best_epoch, minimum.best_iteration) == (1.0, 3, 6)
    assert (closest.best_value, closest.best_epoch, closest.best_iteration) == (5.0, 2, 4)
    assert (per_iteration.best_value, per_iteration.best_iteration) == (6.0, 4)


@pytest.mark.parametrize("stop", [3, 6])
def test_best_values_resume_from_a_snapshot(tmp_path: Any, stop: int) -> None:
    expected = _best_run(tmp_path / "whole", _all_best)
    _best_run(tmp_path / "resumed", _all_best, stop=stop)
    resumed = _best_run(tmp_path / "resumed", _all_best, resume=True)
    for got, want in zip(resumed, expected):
        assert (got.best_value, got.best_epoch, got.best_iteration) == (
            want.best_value,
            want.best_epoch,
            want.best_iteration,
        )


def test_best_value_before_any_comparison_is_an_error() -> None:
    best = MinValue("val/loss")
    for attribute in ("best_value", "best_epoch", "best_iteration"):
        with pytest.raises(RuntimeError, match=r"MinValue\('val/loss'\) has no best value yet"):
            getattr(best, attribute)


def test_best_value_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="key must be a non-empty string"):
        MaxValue("")
    with pytest.raises(TypeError, match="compare must be callable"):
        BestValue("loss", "greater")  # type: ignore[arg-type]
    assert BestValue("loss", operator.lt).state_dict()["_best_epoch"] is None


# --- FailOnNonNumber -----------------------------------------------------------------------


def test_fail_on_non_number_is_silent_while_values_are_finite(tmp_path: Any) -> None:
    model = _model()
    manager = _manager(model, tmp_path, FailOnNonNumber(), lr=0.1)
    while not manager.stop_trigger:
        _step(manager, model, {})
    assert manager.iteration == 6


def test_fail_on_non_number_names_the_parameter_with_nan(tmp_path: Any) -> None:
    model = _model()
    manager = _manager(model, tmp_path, FailOnNonNumber())
    _step(manager, model, {})
    with torch.no_grad():
        _last_bias(model)[1] = math.nan
    with (
        pytest.raises(RuntimeError, match=r"in 'main' diverged: the data of parameter '2.bias'"),
        manager.run_iteration(),
    ):
        pass


@pytest.mark.parametrize("check_grad", [False, True])
def test_fail_on_non_number_checks_gradients_unless_disabled(
    tmp_path: Any, check_grad: bool
) -> None:
    model = torch.nn.Linear(2, 1)
    manager = _manager(model, tmp_path, FailOnNonNumber(check_grad=check_grad))

    def iteration() -> None:
        with manager.run_iteration():
            model.weight.grad = torch.tensor([[1.0, math.inf]])

    if check_grad:
        with pytest.raises(RuntimeError, match="the gradient of parameter 'weight' contains Inf"):
            iteration()
    else:
        iteration()
        assert manager.iteration == 1


def test_modules_export_their_names() -> None:
    extensions = pytorch_pfn_extras.training.extensions
    modules = {
        "parameter_statistics": ["ParameterStatistics"],
        "micro_average": ["MicroAverage"],
        "best_value": ["BestValue", "MaxValue", "MinValue"],
        "fail_on_non_number": ["FailOnNonNumber"],
    }
    for module_name, names in modules.items():
        module = importlib.import_module(f"{extensions.__name__}.{module_name}")
        assert module.__all__ == names
