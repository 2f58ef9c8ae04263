"""The engine's evaluator and the Evaluator extension behave the same around each batch.

``ppe.engine.create_evaluator`` and ``ppe.training.extensions.Evaluator`` share how the models
are put in eval mode and back, how the reports of a smaller last batch are weighted, what a
metric may return, and the progress line (drawn by ``extensions.util.ProgressBar``). Each test
runs both, as PPE user code would.
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
from pytorch_pfn_extras.training import extensions

Evaluate = Callable[..., dict[str, float]]


class Model(torch.nn.Module):
    """Reports the mean of each batch; records its ``train()`` calls and the modes it ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)
        self.norm = torch.nn.BatchNorm1d(1)
        self.train_calls: list[bool] = []
        self.modes: set[tuple[bool, bool, bool]] = set()

    def train(self, mode: bool = True) -> Model:
        self.train_calls.append(mode)
        return super().train(mode)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.modes.add((self.training, self.linear.training, self.norm.training))
        ppe.reporting.report({"val/x": x.mean()})
        return {"x": x}


def _engine(model: Model, batches: Any, **kwargs: Any) -> dict[str, float]:
    ppe.runtime.to(model, "cpu")
    means = ppe.engine.create_evaluator(model, **kwargs).run(batches)
    return {key: float(value) for key, value in means.items()}


def _extension(model: Model, batches: Any, **kwargs: Any) -> dict[str, float]:
    result = extensions.Evaluator(batches, model, **kwargs)()
    return {key: float(value) for key, value in result.items()}


EVALUATORS = pytest.mark.parametrize("evaluate", [_engine, _extension], ids=["engine", "extension"])


def _batches(*sizes_and_values: tuple[int, float]) -> list[torch.Tensor]:
    return [torch.full((size, 1), value) for size, value in sizes_and_values]


@EVALUATORS
@pytest.mark.parametrize(
    ("before", "after_calls"),
    [
        ("train", [False, True]),  # all in train mode: one model.train(True) restores it
        ("eval", [False, False]),  # left in eval mode: model.train(False)
        ("frozen", [False, True]),  # a frozen BatchNorm: train(mode) module by module
    ],
)
def test_both_restore_each_module_mode_with_train(
    evaluate: Evaluate, before: str, after_calls: list[bool]
) -> None:
    model = Model()
    model.train(before != "eval")
    if before == "frozen":
        model.norm.eval()
    modes = [m.training for m in model.modules()]
    model.train_calls.clear()
    evaluate(model, _batches((2, 1.0), (2, 2.0)))
    assert model.modes == {(False, False, False)}  # every module evaluated in eval mode
    assert [m.training for m in model.modules()] == modes
    assert model.train_calls == after_calls  # eval(), then the restoring train(mode)


@EVALUATORS
def test_both_restore_the_modes_when_a_step_raises(evaluate: Evaluate) -> None:
    failing = Model().train()
    failing.norm.eval()

    def forward(x: torch.Tensor) -> None:
        raise ValueError("broken batch")

    failing.forward = forward  # type: ignore[method-assign,assignment]
    with pytest.raises(ValueError, match="broken batch"):
        evaluate(failing, [torch.ones(2, 1)])
    assert (failing.training, failing.linear.training, failing.norm.training) == (
        True,
        True,
        False,
    )


@EVALUATORS
def test_both_weight_a_smaller_last_batch_by_its_size(evaluate: Evaluate) -> None:
    result = evaluate(Model(), _batches((4, 1.0), (4, 2.0), (2, 7.0)))
    # the mean over the 10 samples, not the mean of the 3 batch means (10 / 3)
    assert result == {"val/x": pytest.approx((4 * 1.0 + 4 * 2.0 + 2 * 7.0) / 10)}


@EVALUATORS
def test_both_keep_the_weight_of_a_reported_pair(evaluate: Evaluate) -> None:
    class Pairs(Model):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            ppe.reporting.report({"val/x": (x.mean(), 1)})  # one vote per batch
            return {"x": x}

    assert evaluate(Pairs(), _batches((8, 0.0), (2, 1.0))) == {"val/x": pytest.approx(0.5)}


def _not_a_dict(*args: Any) -> float:
    return 0.5


@EVALUATORS
def test_both_reject_a_metric_returning_a_non_dict(evaluate: Evaluate) -> None:
    with pytest.raises(TypeError, match=r"the metric .*_not_a_dict.* returned a float"):
        evaluate(Model(), _batches((2, 1.0)), metrics=[_not_a_dict])


@EVALUATORS
def test_both_reject_a_metric_that_is_not_callable(evaluate: Evaluate) -> None:
    with pytest.raises(TypeError, match=r"a metric must be a callable metric.*\(batch, outputs"):
        evaluate(Model(), _batches((2, 1.0)), metrics=[3])


_LINE = re.compile(
    r"validation \[(?P<bar>[#.]{30})\] +(?P<percent>[\d.]+)% (?P<done>\d+)/(?P<size>\d+) "
    r"iterations, (?:[\d.e+]+ iters/sec|starting\.\.\.)\n"
)


@EVALUATORS
def test_both_print_the_same_progress_line(
    evaluate: Evaluate, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate(Model(), _batches((2, 1.0), (2, 2.0), (1, 3.0)), progress_bar=True)
    text = capsys.readouterr().out
    lines = [m.groupdict() for m in _LINE.finditer(text)]
    assert sum(len(m.group(0)) for m in _LINE.finditer(text)) == len(text)  # nothing else
    # off a terminal: the first batch at once, then at most every 5 s, and the final line
    assert [(line["done"], line["size"]) for line in lines] == [("1", "3"), ("3", "3")]
    assert (lines[-1]["bar"], lines[-1]["percent"]) == ("#" * 30, "100.00")


@EVALUATORS
def test_both_count_the_batches_of_a_loader_without_len(
    evaluate: Evaluate, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate(Model(), iter(_batches(*[(2, 1.0)] * 5)), progress_bar=True)
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"validation: 5 iterations, [\d.e+]+ iters/sec", last)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@EVALUATORS
def test_both_redraw_the_line_in_place_on_a_terminal(
    evaluate: Evaluate, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    class Slow(Model):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            now[0] += 0.25  # each batch takes a quarter of a second
            return super().forward(x)

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    evaluate(Slow(), _batches(*[(2, 1.0)] * 3), progress_bar=True)
    first, *drawings = terminal.getvalue().split("\x1b[J")  # clear below the cursor
    assert first == ""
    assert [d.endswith("\n\x1b[1A") for d in drawings] == [True] * 3 + [False]  # back up
    matches = [_LINE.fullmatch(d.removesuffix("\x1b[1A")) for d in drawings]
    assert [m and m["done"] for m in matches] == ["1", "2", "3", "3"]  # the last one stays
    assert drawings[0].startswith("validation [##########....................]  33.33% 1/3 ")
    assert drawings[-1].endswith(" 3/3 iterations, 4 iters/sec\n")  # over the last drawings


def test_progress_bar_extension_ends_with_its_last_drawing_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    @ppe.training.make_extension(trigger=(1, "iteration"), priority=0)
    def slow_writer(manager: Any) -> None:
        now[0] += 5.0  # runs after the ProgressBar: it finalizes five seconds later

    out = _Terminal()
    manager = ppe.training.ExtensionsManager({}, {}, 1, iters_per_epoch=4, out_dir=str(tmp_path))
    manager.extend(extensions.ProgressBar(update_interval=2, bar_length=10, out=out))
    manager.extend(slow_writer)
    while not manager.stop_trigger:
        with manager.run_iteration():
            now[0] += 1.0
    _, *drawings = out.getvalue().split("\x1b[J")
    assert len(drawings) == 3  # iterations 2 and 4, then the final drawing
    assert drawings[1] == drawings[2] + "\x1b[4A"  # the last update again, for good
    # 4 iterations in 19 s when it was drawn at iteration 4 (not 4 in 24 s at the end)
    assert drawings[2].endswith("\n   0.21053 iters/sec. Estimated time to finish: 0:00:00.\n")
