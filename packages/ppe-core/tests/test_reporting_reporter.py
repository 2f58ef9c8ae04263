from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.reporting import (
    DictSummary,
    Reporter,
    get_current_reporter,
    report,
    report_scope,
)


def test_report_prefixes_keys_with_the_observer_name() -> None:
    reporter = Reporter()
    observer = object()
    reporter.add_observer("my_observer", observer)
    observation: dict[str, Any] = {}
    with reporter.scope(observation):
        reporter.report({"x": 1, "y": 2.5}, observer)
    assert observation == {"my_observer/x": 1, "my_observer/y": 2.5}


def test_report_without_observer_keeps_the_names() -> None:
    reporter = Reporter()
    observation: dict[str, Any] = {}
    with reporter.scope(observation):
        reporter.report({"x": 1})
    assert observation == {"x": 1}


def test_add_observers_registers_each_module_with_the_prefix() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    reporter = Reporter()
    reporter.add_observers("main", model.named_modules())
    observation: dict[str, Any] = {}
    with reporter.scope(observation):
        reporter.report({"a": 1}, model)
        reporter.report({"b": 2}, model[0])
        reporter.report({"c": 3}, model[1])
    assert observation == {"main/a": 1, "main0/b": 2, "main1/c": 3}


def test_observers_are_identified_by_identity_not_equality() -> None:
    reporter = Reporter()
    first, second = [1], [1]  # equal, distinct objects
    reporter.add_observer("first", first)
    observation: dict[str, Any] = {}
    with reporter.scope(observation), pytest.raises(KeyError, match="not registered"):
        reporter.report({"x": 1}, second)
    assert observation == {}


def test_unregistered_observer_raises_key_error_naming_the_fix() -> None:
    reporter = Reporter()
    with pytest.raises(KeyError, match=r"list at 0x[0-9a-f]+ is not registered.*add_observer"):
        reporter.report({"x": 1}, [])


def test_scope_swaps_the_observation_and_restores_it() -> None:
    reporter = Reporter()
    outer: dict[str, Any] = {}
    inner: dict[str, Any] = {}
    reporter.observation = outer
    with reporter.scope(inner):
        assert get_current_reporter() is reporter
        report({"x": 1})
    assert reporter.observation is outer
    assert inner == {"x": 1}
    assert outer == {}


def test_with_reporter_makes_it_current_and_nests() -> None:
    first, second = Reporter(), Reporter()
    with first:
        assert get_current_reporter() is first
        with second:
            assert get_current_reporter() is second
            report({"x": 2})
        assert get_current_reporter() is first
        report({"x": 1})
    assert first.observation == {"x": 1}
    assert second.observation == {"x": 2}


def test_current_reporter_is_restored_when_the_block_raises() -> None:
    reporter = Reporter()
    with pytest.raises(ZeroDivisionError), reporter.scope({}):
        _ = 1 / 0
    with pytest.raises(RuntimeError, match="no reporter is current"):
        get_current_reporter()


def test_report_without_current_reporter_does_nothing() -> None:
    report({"x": 1})  # no error, nowhere to go
    with pytest.raises(RuntimeError, match="with reporter"):
        get_current_reporter()


def test_report_scope_uses_current_reporter_without_pushing_it() -> None:
    reporter = Reporter()
    observer = object()
    reporter.add_observer("my_observer", observer)
    observation: dict[str, Any] = {}
    with reporter:
        with report_scope(observation):
            report({"x": 1}, observer)
            assert get_current_reporter() is reporter
        report({"after": 1})
    assert observation == {"my_observer/x": 1}
    assert reporter.observation == {"after": 1}


def test_report_scope_needs_a_current_reporter() -> None:
    with pytest.raises(RuntimeError, match="no reporter is current"), report_scope({}):
        pass


def test_current_reporter_is_per_thread() -> None:
    reporter = Reporter()
    seen: list[BaseException | Reporter] = []

    def other_thread() -> None:
        report({"from_thread": 1})  # no reporter is current in this thread
        try:
            seen.append(get_current_reporter())
        except RuntimeError as error:
            seen.append(error)

    with reporter:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert isinstance(seen[0], RuntimeError)
    assert reporter.observation == {}


@pytest.mark.parametrize(
    "value",
    [1, 2.5, np.float32(1.5), np.array(3.0), torch.tensor(4.0), lambda: 5.0],
    ids=["int", "float", "numpy-scalar", "0d-array", "tensor", "callable"],
)
def test_reported_values_are_stored_as_given(value: Any) -> None:
    reporter = Reporter()
    with reporter:
        report({"v": value})
    assert reporter.observation["v"] is value


class _GraphPayload:
    """Held by an autograd node's ctx: alive exactly as long as the graph is."""


class _KeepsPayload(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, payload: _GraphPayload) -> torch.Tensor:
        ctx.payload = payload
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * 2, None


def _loss_with_graph() -> tuple[torch.Tensor, weakref.ref[_GraphPayload]]:
    payload = _GraphPayload()
    x = torch.ones(3, requires_grad=True)
    loss = _KeepsPayload.apply(x, payload).sum()
    return loss, weakref.ref(payload)


def test_reporting_a_tensor_keeps_no_autograd_graph_alive() -> None:
    reporter = Reporter()
    loss, graph_alive = _loss_with_graph()
    with reporter:
        report({"loss": loss})
    stored = reporter.observation["loss"]
    assert not stored.requires_grad
    assert stored.grad_fn is None
    del loss
    gc.collect()
    assert graph_alive() is None
    assert stored.item() == 6.0


def test_keeping_the_tensor_itself_would_keep_the_graph_alive() -> None:
    # Control for the test above: the weakref does detect a live graph.
    loss, graph_alive = _loss_with_graph()
    kept = {"loss": loss}
    del loss
    gc.collect()
    assert graph_alive() is not None
    kept.clear()
    gc.collect()
    assert graph_alive() is None


def test_summarizing_a_training_loop_of_reports() -> None:
    model = torch.nn.Linear(3, 1)
    reporter = Reporter()
    reporter.add_observer("main", model)
    summary = DictSummary()
    x, t = torch.randn(8, 3), torch.randn(8, 1)
    losses = []
    for _ in range(5):
        observation: dict[str, Any] = {}
        with reporter.scope(observation):
            loss = torch.nn.functional.mse_loss(model(x), t)
            report({"loss": loss, "lr": 0.1}, model)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
        losses.append(loss.item())
        summary.add(observation)
    mean = summary.compute_mean()
    assert isinstance(mean["main/loss"], torch.Tensor)  # a tensor was reported: no .item()
    assert float(mean["main/loss"]) == pytest.approx(float(np.mean(losses)))
    assert mean["main/lr"] == pytest.approx(0.1)
