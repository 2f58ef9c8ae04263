"""Triggers, driven by a real ExtensionsManager: when they fire, and exact resume."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.trigger import Trigger, get_trigger
from pytorch_pfn_extras.training.triggers import (
    BestValueTrigger,
    EarlyStoppingTrigger,
    FunctionTrigger,
    IntervalTrigger,
    ManualScheduleTrigger,
    MaxValueTrigger,
    MinValueTrigger,
    OnceTrigger,
    TimeTrigger,
)


def _manager(iters_per_epoch: int, out_dir: Any, **kwargs: Any) -> ExtensionsManager:
    kwargs.setdefault("max_epochs", 10**6)
    return ExtensionsManager({}, {}, iters_per_epoch=iters_per_epoch, out_dir=out_dir, **kwargs)


def _fires(
    trigger: Any,
    iterations: int,
    iters_per_epoch: int,
    out_dir: Any,
    values: Callable[[int], dict[str, float]] | None = None,
) -> list[int]:
    """Iterations after which ``trigger`` fired in a real training loop."""
    fired: list[int] = []
    manager = _manager(iters_per_epoch, out_dir)
    manager.extend(lambda m: fired.append(m.iteration), name="probe", trigger=trigger)
    for i in range(1, iterations + 1):
        with manager.run_iteration():
            if values is not None:
                reporting.report(values(i))
    return fired


def _weights_only_round_trip(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _fires_with_resume(
    make_trigger: Callable[[], Any],
    iterations: int,
    resume_at: int,
    iters_per_epoch: int,
    out_dir: Any,
    values: Callable[[int], dict[str, float]],
) -> tuple[list[int], dict[str, Any]]:
    """Fires (and final trigger state) when the loop is resumed from a state at ``resume_at``."""
    fired: list[int] = []
    state = None
    for start, stop in ((1, resume_at), (resume_at + 1, iterations)):
        manager = _manager(iters_per_epoch, out_dir)
        trigger = make_trigger()
        manager.extend(lambda m: fired.append(m.iteration), name="probe", trigger=trigger)
        if state is not None:
            manager.load_state_dict(_weights_only_round_trip(state))
        for i in range(start, stop + 1):
            with manager.run_iteration():
                reporting.report(values(i))
        state = manager.state_dict()
    return fired, state["extensions"]["probe"]["trigger"]


@pytest.mark.parametrize(
    ("period", "unit", "iters_per_epoch", "expected"),
    [
        (3, "iteration", 5, [3, 6, 9, 12]),
        (1, "epoch", 5, [5, 10]),
        (2, "epoch", 3, [6, 12]),
        (0.5, "epoch", 4, [2, 4, 6, 8, 10, 12]),
        (0.5, "epoch", 3, [2, 3, 5, 6, 8, 9, 11, 12]),
        (1.5, "epoch", 2, [3, 6, 9, 12]),
    ],
)
def test_interval_trigger_fires_at_period_multiples(
    tmp_path: Any, period: float, unit: str, iters_per_epoch: int, expected: list[int]
) -> None:
    assert _fires(IntervalTrigger(period, unit), 12, iters_per_epoch, tmp_path) == expected  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    period=st.sampled_from([0.1, 0.25, 0.3, 1 / 3, 0.7, 1.0, 1.2, 2.5]),
    iters_per_epoch=st.integers(1, 40),
)
def test_interval_trigger_epoch_fires_when_epoch_detail_passes_a_period_multiple(
    period: float, iters_per_epoch: int
) -> None:
    trigger = IntervalTrigger(period, "epoch")
    exact = Fraction(repr(period))

    def periods_done(iteration: int) -> int:
        return math.floor(Fraction(iteration, iters_per_epoch) / exact)

    for iteration in range(1, 4 * iters_per_epoch + 1):
        expected = periods_done(iteration) > periods_done(iteration - 1)
        assert trigger.may_fire(iteration, iters_per_epoch) == expected


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((1, "epochs"), ValueError, "'epochs'"),
        ((0, "iteration"), ValueError, "positive, got 0"),
        ((-2, "epoch"), ValueError, "positive, got -2"),
        ((1.5, "iteration"), ValueError, "integer, got 1.5"),
        (("1", "epoch"), TypeError, "'1'"),
        ((float("nan"), "epoch"), ValueError, "finite"),
    ],
)
def test_interval_trigger_rejects_bad_input(args: tuple[Any, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        IntervalTrigger(*args)


def test_get_trigger_converts_tuples_callables_and_none(tmp_path: Any) -> None:
    interval = get_trigger((2, "iteration"))
    assert isinstance(interval, IntervalTrigger)
    assert interval.get_training_length() == (2, "iteration")
    assert get_trigger(interval) is interval
    assert _fires(get_trigger(None), 5, 2, tmp_path) == []
    assert _fires(lambda m: m.iteration in (2, 3), 5, 2, tmp_path) == [2, 3]
    with pytest.raises(TypeError, match="got 3 of type int"):
        get_trigger(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(period, unit\)"):
        get_trigger((1, "epoch", 2))  # type: ignore[arg-type]


def test_get_trigger_keeps_the_state_of_a_stateful_callable(tmp_path: Any) -> None:
    class EveryOther:
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self, manager: Any) -> bool:
            self.calls += 1
            return self.calls % 2 == 0

        def state_dict(self) -> dict[str, int]:
            return {"calls": self.calls}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.calls = state["calls"]

    trigger = get_trigger(EveryOther())
    manager = _manager(2, tmp_path)
    assert trigger.state_dict() == {"calls": 0}
    assert [trigger(manager) for _ in range(3)] == [False, True, False]
    other = get_trigger(EveryOther())
    other.load_state_dict(trigger.state_dict())
    assert other(manager) is True


def test_trigger_base_class_requires_call() -> None:
    with pytest.raises(TypeError):
        Trigger()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("points", "unit", "iters_per_epoch", "expected"),
    [
        ([2, 5, 7], "iteration", 3, [2, 5, 7]),
        (4, "iteration", 3, [4]),
        ([1, 2], "epoch", 3, [3, 6]),
        ([0.5, 1.25], "epoch", 4, [2, 5]),
        ([1 / 3], "epoch", 3, [1]),
        ([0.4], "epoch", 3, [2]),
    ],
)
def test_manual_schedule_trigger_fires_at_points(
    tmp_path: Any, points: Any, unit: str, iters_per_epoch: int, expected: list[int]
) -> None:
    assert _fires(ManualScheduleTrigger(points, unit), 12, iters_per_epoch, tmp_path) == expected  # type: ignore[arg-type]


def test_manual_schedule_trigger_is_finished_after_last_point(tmp_path: Any) -> None:
    trigger = ManualScheduleTrigger([2, 4], "iteration")
    manager = _manager(3, tmp_path)
    manager.extend(lambda m: None, name="probe", trigger=trigger)
    for _ in range(3):
        with manager.run_iteration():
            pass
    assert not trigger.finished
    with manager.run_iteration():
        pass
    assert trigger.finished
    assert trigger.state_dict() == {"finished": True}
    assert trigger.may_fire(4, 3) and not trigger.may_fire(3, 3)


@pytest.mark.parametrize(
    ("points", "unit", "match"),
    [
        ([], "iteration", "must not be empty"),
        ([0], "iteration", "positive, got 0"),
        ([1.5], "iteration", "integers, got 1.5"),
        ([1], "epochs", "'epochs'"),
    ],
)
def test_manual_schedule_trigger_rejects_bad_input(points: Any, unit: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ManualScheduleTrigger(points, unit)


def test_once_trigger_fires_once_and_on_resume_only_if_asked(tmp_path: Any) -> None:
    assert _fires(OnceTrigger(), 4, 2, tmp_path) == [1]
    for call_on_resume, expected in ((False, [1]), (True, [1, 3])):
        fired, _ = _fires_with_resume(
            lambda c=call_on_resume: OnceTrigger(c), 4, 2, 2, tmp_path, lambda i: {}
        )
        assert fired == expected


def test_once_trigger_skips_initialize_of_its_extension_after_resume(tmp_path: Any) -> None:
    class Ext:
        initialized = 0

        def __call__(self, manager: Any) -> None:
            pass

        def initialize(self, manager: Any) -> None:
            Ext.initialized += 1

    state = None
    for _ in range(2):
        manager = _manager(2, tmp_path)
        manager.extend(Ext(), trigger=OnceTrigger())
        if state is not None:
            manager.load_state_dict(state)
        with manager.run_iteration():
            pass
        state = manager.state_dict()
    assert Ext.initialized == 1


def test_time_trigger_fires_once_per_period_crossing(tmp_path: Any) -> None:
    trigger = TimeTrigger(10.0)

    class Clock:
        elapsed_time = 0.0

    clock = Clock()
    fired = []
    for t in (1.0, 9.9, 10.0, 10.5, 35.0, 39.0, 40.0):
        clock.elapsed_time = t
        fired.append(trigger(clock))  # type: ignore[arg-type]
    assert fired == [False, False, True, False, True, False, True]
    restored = TimeTrigger(10.0)
    restored.load_state_dict(_weights_only_round_trip(trigger.state_dict()))
    clock.elapsed_time = 49.0
    assert restored(clock) is False  # type: ignore[arg-type]
    clock.elapsed_time = 50.0
    assert restored(clock) is True  # type: ignore[arg-type]


def test_time_trigger_uses_manager_elapsed_time(tmp_path: Any) -> None:
    assert _fires(TimeTrigger(1e-9), 3, 2, tmp_path) == [1, 2, 3]
    assert _fires(TimeTrigger(1e6), 3, 2, tmp_path) == []
    with pytest.raises(ValueError, match="positive, got 0"):
        TimeTrigger(0)


def test_function_trigger_calls_function_on_its_interval(tmp_path: Any) -> None:
    calls: list[int] = []

    def check(threshold: int, *, extra: int) -> bool:
        calls.append(threshold)
        return len(calls) % 2 == 0

    trigger = FunctionTrigger(check, [5], {"extra": 1}, trigger=(3, "iteration"))
    assert _fires(trigger, 12, 4, tmp_path) == [6, 12]
    assert calls == [5, 5, 5, 5]
    assert trigger.may_fire(3, 4) and not trigger.may_fire(4, 4)
    with pytest.raises(TypeError, match="must be callable"):
        FunctionTrigger(3)  # type: ignore[arg-type]


def _score(iters_per_epoch: int) -> Callable[[int], dict[str, float]]:
    # Per-epoch means 2, 1, 0, 1, 2, 3...: best at the third epoch.
    def values(i: int) -> dict[str, float]:
        epoch = (i - 1) // iters_per_epoch
        return {"val/score": abs(epoch - 2) + 0.01 * (i % iters_per_epoch)}

    return values


@pytest.mark.parametrize(
    ("trigger_cls", "expected"),
    [(MinValueTrigger, [3, 6, 9]), (MaxValueTrigger, [3, 18])],
)
def test_min_max_value_triggers_fire_on_new_best_interval_mean(
    tmp_path: Any, trigger_cls: Any, expected: list[int]
) -> None:
    def values(i: int) -> dict[str, float]:
        return {"v": [5.0, 4.0, 3.0, 3.5, 4.5, 6.0][(i - 1) // 3]}

    assert _fires(trigger_cls("v", (3, "iteration")), 18, 3, tmp_path, values) == expected


def test_best_value_trigger_uses_compare_and_names_missing_key(tmp_path: Any) -> None:
    trigger = BestValueTrigger("v", lambda best, new: abs(new) < abs(best), (1, "iteration"))
    values = [3.0, -2.0, 2.5, 1.0]
    assert _fires(trigger, 4, 2, tmp_path, lambda i: {"v": values[i - 1]}) == [1, 2, 4]
    assert trigger.best_value == 1.0
    with pytest.raises(KeyError, match="'missing' was never reported"):
        _fires(MinValueTrigger("missing", (1, "iteration")), 1, 2, tmp_path, lambda i: {"v": 1})


def test_early_stopping_trigger_stops_after_patience_checks(tmp_path: Any) -> None:
    trigger = EarlyStoppingTrigger(monitor="val/score", patience=2, max_trigger=(10, "epoch"))
    manager = _manager(3, tmp_path, stop_trigger=trigger)
    values = _score(3)
    iterations = 0
    while not manager.stop_trigger:
        with manager.run_iteration():
            reporting.report(values(manager.iteration + 1))
        iterations += 1
    # Best at epoch 3; no improvement at epochs 4 and 5 -> stop at the end of epoch 5.
    assert iterations == 15
    assert trigger.best == pytest.approx(0 + 0.01 * (7 % 3 + 8 % 3 + 9 % 3) / 3)
    assert trigger.count == 2
    assert trigger.get_training_length() == (10, "epoch")


def test_early_stopping_trigger_stops_at_max_trigger(tmp_path: Any) -> None:
    trigger = EarlyStoppingTrigger(monitor="main/loss", max_trigger=(4, "iteration"))
    manager = _manager(3, tmp_path, stop_trigger=trigger)
    iterations = 0
    while not manager.stop_trigger:
        with manager.run_iteration():
            reporting.report({"main/loss": 1.0 / (manager.iteration + 1)})
        iterations += 1
    assert iterations == 4


@pytest.mark.parametrize(
    ("monitor", "mode"),
    [("val/accuracy", "max"), ("main/acc", "max"), ("val/loss", "min")],
)
def test_early_stopping_trigger_auto_mode(monitor: str, mode: str) -> None:
    assert EarlyStoppingTrigger(monitor=monitor).mode == mode


def test_early_stopping_trigger_warns_when_monitor_is_missing(tmp_path: Any) -> None:
    trigger = EarlyStoppingTrigger(check_trigger=(2, "iteration"), monitor="val/loss")
    manager = _manager(2, tmp_path, stop_trigger=trigger)
    with pytest.warns(UserWarning, match="'val/loss' was not reported"):
        for _ in range(4):
            assert not manager.stop_trigger
            with manager.run_iteration():
                reporting.report({"main/loss": 1.0})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "maximum"}, "'maximum'"),
        ({"patience": 0}, "patience must be an integer >= 1, got 0"),
        ({"max_trigger": (1, "epochs")}, "'epochs'"),
    ],
)
def test_early_stopping_trigger_rejects_bad_input(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EarlyStoppingTrigger(**kwargs)


_STATEFUL = {
    "min_value": lambda: MinValueTrigger("val/score", (1, "epoch")),
    "max_value": lambda: MaxValueTrigger("val/score", (2, "iteration")),
    "best_value": lambda: BestValueTrigger("val/score", lambda b, n: n < b - 0.5, (1, "epoch")),
    "early_stopping": lambda: EarlyStoppingTrigger(
        monitor="val/score", patience=2, max_trigger=(100, "epoch")
    ),
    "manual": lambda: ManualScheduleTrigger([0.5, 2.5, 4], "epoch"),
    "interval": lambda: IntervalTrigger(0.75, "epoch"),
    "once": lambda: OnceTrigger(),
    "function": lambda: FunctionTrigger(lambda: True, trigger=(5, "iteration")),
}


@pytest.mark.parametrize("name", sorted(_STATEFUL))
# The managers write no file: sharing tmp_path between examples is harmless.
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(resume_at=st.integers(1, 29))
def test_trigger_resumes_exactly_from_any_iteration(
    tmp_path: Any, name: str, resume_at: int
) -> None:
    make = _STATEFUL[name]
    values = _score(4)
    expected = _fires(make(), 30, 4, tmp_path, values)
    trigger = make()
    manager = _manager(4, tmp_path)
    manager.extend(lambda m: None, name="probe", trigger=trigger)
    for i in range(1, 31):
        with manager.run_iteration():
            reporting.report(values(i))
    fired, state = _fires_with_resume(make, 30, resume_at, 4, tmp_path, values)
    assert fired == expected
    assert state == manager.state_dict()["extensions"]["probe"]["trigger"]
