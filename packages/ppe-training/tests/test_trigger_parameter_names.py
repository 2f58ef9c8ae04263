"""Triggers take PPE 0.9's parameter names: callers pass them by keyword, subclasses override.

PPE names them inconsistently, and users copy them: the base class has ``may_fire(iteration,
epoch_len)`` and ``load_state_dict(state)``; most built-in triggers ``may_fire(iteration,
epoch_length)`` and ``load_state_dict(to_load)``. The manager calls both positionally, so a user's
trigger may use either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras.training import ExtensionsManager, make_extension
from pytorch_pfn_extras.training.trigger import IntervalTrigger, Trigger, get_trigger
from pytorch_pfn_extras.training.triggers import (
    BestValueTrigger,
    EarlyStoppingTrigger,
    FunctionTrigger,
    ManualScheduleTrigger,
    MaxValueTrigger,
    MinValueTrigger,
    OnceTrigger,
    TimeTrigger,
)


def _greater(best: float, new: float) -> bool:
    return new > best


@pytest.mark.parametrize(
    ("make", "epoch_name", "state_name"),
    [
        (lambda: IntervalTrigger(2, "iteration"), "epoch_length", "state"),
        (lambda: IntervalTrigger(0.5, "epoch"), "epoch_length", "state"),
        (lambda: ManualScheduleTrigger([2], "iteration"), "epoch_length", "state"),
        (lambda: EarlyStoppingTrigger(), "epoch_length", "state"),
        (lambda: BestValueTrigger("v", _greater), "epoch_length", "to_load"),
        (lambda: MaxValueTrigger("v"), "epoch_length", "to_load"),
        (lambda: MinValueTrigger("v"), "epoch_length", "to_load"),
        (lambda: OnceTrigger(), "epoch_length", "to_load"),
        (lambda: FunctionTrigger(lambda: True, trigger=(2, "iteration")), "epoch_len", "to_load"),
        (lambda: TimeTrigger(1.0), "epoch_len", "to_load"),
        (lambda: get_trigger(None), "epoch_len", "state"),
        (lambda: get_trigger(lambda manager: True), "epoch_len", "state"),
    ],
)
def test_builtin_triggers_take_ppe09_keyword_names(
    make: Callable[[], Trigger], epoch_name: str, state_name: str
) -> None:
    trigger = make()
    for iteration in (1, 2, 3, 4):
        by_keyword = trigger.may_fire(iteration=iteration, **{epoch_name: 4})
        assert by_keyword == trigger.may_fire(iteration, 4)
    state = trigger.state_dict()
    trigger.load_state_dict(**{state_name: state})
    assert trigger.state_dict() == state


class _EveryThird(Trigger):
    """A user's trigger written against PPE's base class."""

    def __init__(self) -> None:
        self.calls = 0
        self.asked: list[tuple[int, int]] = []

    def __call__(self, manager: Any) -> bool:
        self.calls += 1
        return bool(manager.iteration % 3 == 0)

    def may_fire(self, iteration: int, epoch_len: int) -> bool:
        self.asked.append((iteration, epoch_len))
        return iteration % 3 == 0

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.calls = state["calls"]


class _EveryThirdWithOtherNames(_EveryThird):
    """The same, with the names of PPE's built-in triggers."""

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        return super().may_fire(iteration, epoch_length)

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        super().load_state_dict(to_load)


@pytest.mark.parametrize("trigger_class", [_EveryThird, _EveryThirdWithOtherNames])
def test_user_triggers_overriding_with_either_name_drive_the_manager(
    tmp_path: Path, trigger_class: type[_EveryThird]
) -> None:
    def make_manager(trigger: Trigger) -> ExtensionsManager:
        manager = ExtensionsManager({}, {}, 2, iters_per_epoch=5, out_dir=tmp_path)
        probe = make_extension(needs_model_state=True)(lambda manager: None)
        manager.extend(probe, name="probe", trigger=trigger)
        return manager

    trigger = trigger_class()
    manager = make_manager(trigger)
    assert manager.needs_model_state(3) and not manager.needs_model_state(4)
    assert trigger.asked == [(3, 5), (4, 5)]
    for _ in range(4):
        with manager.run_iteration():
            pass
    assert trigger.calls == 4

    restored = trigger_class()
    make_manager(restored).load_state_dict(manager.state_dict())
    assert restored.calls == 4
