"""The accumulate extensions and LRScheduler, driven by a real ExtensionsManager."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import pytorch_pfn_extras.training  # noqa: F401 -- the subpackage, without the meta-package
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import PRIORITY_READER, ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, snapshot
from pytorch_pfn_extras.training.extensions.accumulate import (
    AverageAccumulate,
    MaxAccumulate,
    MinAccumulate,
    StandardDeviationAccumulate,
    UnbiasedStandardDeviationAccumulate,
)
from pytorch_pfn_extras.training.extensions.accumulate.max_accumulate import (
    MaxAccumulate as PublicMaxAccumulate,
)
from pytorch_pfn_extras.training.extensions.lr_scheduler import LRScheduler

ACCUMULATES: list[tuple[type, Callable[[np.ndarray], Any]]] = [
    (AverageAccumulate, np.mean),
    (MaxAccumulate, np.max),
    (MinAccumulate, np.min),
    (StandardDeviationAccumulate, np.std),
    (UnbiasedStandardDeviationAccumulate, lambda a: np.std(a, ddof=1)),
]
ITERS_PER_EPOCH = 4
MAX_EPOCHS = 3


def _value(iteration: int) -> float:
    """A deterministic, irregular value for the iteration (1-based)."""
    return math.sin(iteration * 1.7) * 10 + iteration


class _Recorder:
    """A reader extension recording ``(iteration, value)`` whenever ``key`` was reported."""

    priority = PRIORITY_READER

    def __init__(self, key: str) -> None:
        self.key = key
        self.records: list[tuple[int, Any]] = []

    def __call__(self, manager: Any) -> None:
        if self.key in manager.observation:
            self.records.append((manager.iteration, manager.observation[self.key]))


def _manager(
    tmp_path: Path,
    *extensions: Any,
    optimizer: torch.optim.Optimizer | None = None,
    max_epochs: int = MAX_EPOCHS,
) -> ExtensionsManager:
    optimizers = {} if optimizer is None else {"main": optimizer}
    manager = ExtensionsManager(
        {}, optimizers, max_epochs, iters_per_epoch=ITERS_PER_EPOCH, out_dir=str(tmp_path)
    )
    for extension in extensions:
        if isinstance(extension, tuple):
            manager.extend(extension[0], trigger=extension[1])
        else:
            manager.extend(extension)
    return manager


def _train(manager: ExtensionsManager, n: int | None = None, as_tensor: bool = True) -> None:
    done = 0
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            value = _value(manager.iteration + 1)
            reporting.report({"loss": torch.tensor(value) if as_tensor else value})
        done += 1


def _expected(reduce: Callable[[np.ndarray], Any], period: int) -> list[tuple[int, float]]:
    total = ITERS_PER_EPOCH * MAX_EPOCHS
    values = np.array([_value(i) for i in range(1, total + 1)])
    return [
        (end, float(reduce(values[end - period : end]))) for end in range(period, total + 1, period)
    ]


@pytest.mark.parametrize(("cls", "reduce"), ACCUMULATES, ids=lambda x: getattr(x, "__name__", ""))
@pytest.mark.parametrize("as_tensor", [True, False], ids=["tensor", "float"])
@pytest.mark.parametrize(
    ("trigger", "period"), [((1, "epoch"), ITERS_PER_EPOCH), ((3, "iteration"), 3)]
)
def test_accumulated_value_matches_numpy_over_each_interval(
    tmp_path: Path,
    cls: type,
    reduce: Callable[[np.ndarray], Any],
    as_tensor: bool,
    trigger: Any,
    period: int,
) -> None:
    recorder = _Recorder("acc")
    manager = _manager(tmp_path, cls(("loss", "acc"), trigger=trigger), recorder)
    _train(manager, as_tensor=as_tensor)
    got = recorder.records
    assert [it for it, _ in got] == [it for it, _ in _expected(reduce, period)]
    assert all(isinstance(v, torch.Tensor) == as_tensor for _, v in got)
    np.testing.assert_allclose(
        [float(v) for _, v in got], [v for _, v in _expected(reduce, period)], rtol=1e-5
    )


@pytest.mark.parametrize(("cls", "reduce"), ACCUMULATES, ids=lambda x: getattr(x, "__name__", ""))
def test_distributed_accumulation_of_a_single_process_is_the_local_one(
    tmp_path: Path, cls: type, reduce: Callable[[np.ndarray], Any]
) -> None:
    # Without a process group a process is a group of one; the multi-process results are
    # checked by test_distributed_training.py.
    recorder = _Recorder("acc")
    manager = _manager(tmp_path, cls(("loss", "acc"), distributed=True), recorder)
    _train(manager)
    np.testing.assert_allclose(
        [float(v) for _, v in recorder.records],
        [v for _, v in _expected(reduce, ITERS_PER_EPOCH)],
        rtol=1e-5,
    )


def test_distributed_accumulation_without_a_process_group_under_a_launcher_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it
    manager = _manager(tmp_path, AverageAccumulate(("loss", "acc"), distributed=True))
    with pytest.raises(RuntimeError, match=r"one of 2 \(WORLD_SIZE=2\).*not initialized"):
        _train(manager)


def test_tensors_are_accumulated_element_wise_without_leaving_the_tensor(tmp_path: Path) -> None:
    recorder = _Recorder("max")
    manager = _manager(tmp_path, MaxAccumulate(("vec", "max"), trigger=(2, "iteration")), recorder)
    rows = [[1.0, 5.0], [3.0, 2.0], [float("nan"), 0.0], [1.0, -1.0]]
    for row in rows:
        with manager.run_iteration():
            reporting.report({"vec": torch.tensor(row)})
    assert [it for it, _ in recorder.records] == [2, 4]
    torch.testing.assert_close(recorder.records[0][1], torch.tensor([3.0, 5.0]))
    torch.testing.assert_close(
        recorder.records[1][1], torch.tensor([float("nan"), 0.0]), equal_nan=True
    )


def test_iterations_without_the_key_add_nothing_and_an_empty_interval_reports_nothing(
    tmp_path: Path,
) -> None:
    recorder = _Recorder("mean")
    manager = _manager(tmp_path, AverageAccumulate(("loss", "mean")), recorder)
    reported = {1: 2.0, 3: 4.0}  # epoch 1 only, iterations 1 and 3 (1-based)
    while not manager.stop_trigger:
        with manager.run_iteration():
            if manager.iteration + 1 in reported:
                reporting.report({"loss": reported[manager.iteration + 1]})
    assert recorder.records == [(ITERS_PER_EPOCH, 3.0)]


def test_unbiased_standard_deviation_of_a_single_value_is_nan(tmp_path: Path) -> None:
    recorder = _Recorder("std")
    manager = _manager(
        tmp_path, UnbiasedStandardDeviationAccumulate(("loss", "std"), (1, "iteration")), recorder
    )
    _train(manager, n=2)
    assert [it for it, _ in recorder.records] == [1, 2]
    assert all(math.isnan(float(v)) for _, v in recorder.records)


def test_accumulated_value_is_logged_by_log_report_in_the_same_iteration(tmp_path: Path) -> None:
    # Registered after the LogReport, the accumulator still runs first (editor priority).
    log_report = LogReport(keys=["epoch/loss"])
    manager = _manager(tmp_path, log_report, AverageAccumulate(("loss", "epoch/loss")))
    _train(manager)
    got = [entry["epoch/loss"] for entry in log_report.log]
    np.testing.assert_allclose(got, [v for _, v in _expected(np.mean, ITERS_PER_EPOCH)], rtol=1e-5)


def _all_accumulates() -> list[Any]:
    extensions: list[Any] = [
        cls(("loss", cls.__name__), trigger=(3, "iteration")) for cls, _ in ACCUMULATES
    ]
    return extensions + [_Recorder(cls.__name__) for cls, _ in ACCUMULATES]


def _records(manager: ExtensionsManager) -> dict[str, list[tuple[int, float]]]:
    return {
        name: [(it, float(v)) for it, v in entry.extension.records]
        for name, entry in manager.extensions
        if isinstance(entry.extension, _Recorder)
    }


def test_resumed_run_reports_what_the_uninterrupted_run_reports(tmp_path: Path) -> None:
    uninterrupted = _manager(tmp_path / "full", *_all_accumulates())
    _train(uninterrupted)
    # Interrupted at iteration 5: mid-interval (period 3) and mid-epoch.
    snap = (snapshot(autoload=True), (5, "iteration"))
    first = _manager(tmp_path / "run", *_all_accumulates(), snap)
    _train(first, n=6)
    resumed = _manager(tmp_path / "run", *_all_accumulates(), snap)
    _train(resumed)
    assert resumed.iteration == ITERS_PER_EPOCH * MAX_EPOCHS
    full = _records(uninterrupted)
    before, after = _records(first), _records(resumed)
    for name, records in full.items():
        joined = [r for r in before[name] if r[0] <= 5] + after[name]
        assert [it for it, _ in joined] == [it for it, _ in records]
        np.testing.assert_allclose([v for _, v in joined], [v for _, v in records], rtol=1e-6)


# ---------------------------------------------------------------------------- LRScheduler


def _optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)


SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3),
}


def _train_lrs(
    manager: ExtensionsManager, optimizer: torch.optim.Optimizer, n: int | None = None
) -> list[float]:
    """Train, stepping the optimizer each iteration; the lr used by each iteration."""
    lrs = []
    done = 0
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
        done += 1
    return lrs


def _lrs_by_hand(make: Callable[[torch.optim.Optimizer], Any]) -> list[float]:
    optimizer = _optimizer()
    scheduler = make(optimizer)
    lrs = []
    for _ in range(MAX_EPOCHS * 2):  # 2 epochs of the default length, for longer schedules
        for _ in range(ITERS_PER_EPOCH):
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_sequence_is_the_one_of_stepping_by_hand_each_epoch(tmp_path: Path, name: str) -> None:
    optimizer = _optimizer()
    manager = _manager(tmp_path, LRScheduler(SCHEDULERS[name](optimizer)), optimizer=optimizer)
    lrs = _train_lrs(manager, optimizer)
    assert lrs == _lrs_by_hand(SCHEDULERS[name])[: len(lrs)]
    assert len(set(lrs)) > 1


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_resumed_schedule_continues_where_the_snapshot_left_it(tmp_path: Path, name: str) -> None:
    def run(n: int | None) -> list[float]:
        optimizer = _optimizer()
        manager = _manager(
            tmp_path,
            LRScheduler(SCHEDULERS[name](optimizer)),
            snapshot(autoload=True),
            optimizer=optimizer,
        )
        return _train_lrs(manager, optimizer, n)

    first = run(2 * ITERS_PER_EPOCH + 1)  # the snapshot of epoch 2 is the newest
    resumed = run(None)
    expected = _lrs_by_hand(SCHEDULERS[name])[: ITERS_PER_EPOCH * MAX_EPOCHS]
    assert first[: 2 * ITERS_PER_EPOCH] + resumed == expected


def _plateau_run(
    tmp_path: Path, stepper: Any, key: str, max_epochs: int = MAX_EPOCHS
) -> tuple[list[float], float]:
    """The lr of each epoch and the final lr; the value improves during epoch 1 only."""
    optimizer = _optimizer()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
    kwargs = {} if stepper is None else {"stepper": stepper}
    extension = LRScheduler(plateau, **kwargs)
    manager = _manager(tmp_path, extension, optimizer=optimizer, max_epochs=max_epochs)
    lrs = []
    while not manager.stop_trigger:
        with manager.run_iteration():
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            reporting.report({key: torch.tensor(max(3.0 - manager.iteration, 0.0))})
    return lrs[::ITERS_PER_EPOCH], optimizer.param_groups[0]["lr"]


def test_reduce_lr_on_plateau_steps_with_the_reported_val_loss(tmp_path: Path) -> None:
    # Epoch ends all see 0.0: best after epoch 1, bad after 2 and 3 (> patience 1): halved.
    assert _plateau_run(tmp_path, None, "val/loss") == ([1.0, 1.0, 1.0], 0.5)


def test_reduce_lr_on_plateau_steps_with_a_custom_key(tmp_path: Path) -> None:
    stepper = LRScheduler.step_by_value("train/loss")
    per_epoch, _ = _plateau_run(tmp_path, stepper, "train/loss", max_epochs=5)
    assert per_epoch == [1.0, 1.0, 1.0, 0.5, 0.5]


def test_reduce_lr_on_plateau_without_the_value_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'val/loss'.*step_by_value"):
        _plateau_run(tmp_path, None, "other")


def _skipping_training(tmp_path: Path, wait: bool) -> Any:
    optimizer = _optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    extension = LRScheduler(scheduler, wait_for_first_optimizer_step=wait)
    manager = _manager(tmp_path, (extension, (1, "iteration")), optimizer=optimizer)
    while not manager.stop_trigger:
        with manager.run_iteration():
            if manager.iteration >= 2:  # e.g. a GradScaler skipping the first steps
                optimizer.step()
    return scheduler


def test_wait_for_first_optimizer_step_avoids_torch_warning(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step"):
        _skipping_training(tmp_path / "eager", wait=False)
    scheduler = _skipping_training(tmp_path / "waiting", wait=True)
    assert scheduler.last_epoch == ITERS_PER_EPOCH * MAX_EPOCHS - 2


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: LRScheduler(object()), TypeError, "step.*got object"),
        (
            lambda: LRScheduler(SCHEDULERS["StepLR"](_optimizer()), stepper=1),  # type: ignore[arg-type]
            TypeError,
            "stepper must be callable",
        ),
        (
            lambda: LRScheduler(SCHEDULERS["StepLR"](_optimizer()), trigger=(1,)),  # type: ignore[arg-type]
            ValueError,
            r"\(period, unit\)",
        ),
        (lambda: LRScheduler.step_by_value(""), ValueError, "non-empty string"),
        (lambda: AverageAccumulate("loss"), ValueError, "pair of"),  # type: ignore[arg-type]
        (lambda: MinAccumulate(("loss", "")), ValueError, "pair of non-empty strings"),
    ],
)
def test_bad_arguments_raise_clear_errors(make: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_a_non_numeric_value_names_the_key_and_the_type(tmp_path: Path) -> None:
    manager = _manager(tmp_path, AverageAccumulate(("loss", "mean")))
    error = pytest.raises(TypeError, match=r"AverageAccumulate: .*'loss'.*got str")
    with error, manager.run_iteration():
        reporting.report({"loss": "high"})


def test_public_submodules_export_the_same_classes() -> None:
    assert PublicMaxAccumulate is MaxAccumulate
    assert AverageAccumulate.priority > LRScheduler.priority
