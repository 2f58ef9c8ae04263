"""ProgressBar and ProgressBarNotebook: progress, speed and estimated time to finish."""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import (
    LogReport,
    PrintReport,
    ProgressBar,
    ProgressBarNotebook,
)
from pytorch_pfn_extras.training.triggers import EarlyStoppingTrigger

_UPDATE = re.compile(
    r"     total \[(?P<total_bar>[#.]{20})\] +(?P<total>[\d.]+)%\n"
    r"this epoch \[(?P<epoch_bar>[#.]{20})\] +(?P<epoch>[\d.]+)%\n"
    r" +(?P<iteration>\d+) iter, (?P<epochs>\d+) epoch / (?P<length>.+)\n"
    r"(?: *(?P<speed>[\d.e+]+) iters/sec\. Estimated time to finish: (?P<eta>[\d:]+)\.\n"
    r"|  estimating the speed\.\.\.\n)"
)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(
    tmp_path: Path,
    bar: ProgressBar,
    epochs: float = 2,
    iters_per_epoch: int = 10,
    **kwargs: Any,
) -> ExtensionsManager:
    manager = ExtensionsManager(
        {}, {}, epochs, iters_per_epoch=iters_per_epoch, out_dir=tmp_path, **kwargs
    )
    manager.extend(bar)
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
    return manager


def _updates(text: str) -> list[dict[str, str]]:
    updates = [m.groupdict() for m in _UPDATE.finditer(text)]
    assert sum(len(m.group(0)) for m in _UPDATE.finditer(text)) == len(text)  # nothing else
    return updates


def test_shows_progress_every_update_interval(tmp_path: Path) -> None:
    out = io.StringIO()
    _run(tmp_path, ProgressBar(update_interval=5, bar_length=20, out=out))
    updates = _updates(out.getvalue())
    assert [int(u["iteration"]) for u in updates] == [5, 10, 15, 20]
    assert [u["total"] for u in updates] == ["25.00", "50.00", "75.00", "100.00"]
    assert [u["epoch"] for u in updates] == ["50.00", "100.00", "50.00", "100.00"]
    assert [u["epochs"] for u in updates] == ["0", "1", "1", "2"]
    assert {u["length"] for u in updates} == {"2 epochs"}
    assert updates[0]["total_bar"] == "#" * 5 + "." * 15
    assert updates[-1]["total_bar"] == "#" * 20
    assert all(float(u["speed"]) > 0 for u in updates)


def test_training_length_in_iterations(tmp_path: Path) -> None:
    out = io.StringIO()
    bar = ProgressBar(training_length=(40, "iteration"), update_interval=10, bar_length=20, out=out)
    _run(tmp_path, bar, epochs=1, iters_per_epoch=20)
    updates = _updates(out.getvalue())
    assert [(u["iteration"], u["total"]) for u in updates] == [("10", "25.00"), ("20", "50.00")]
    assert updates[0]["length"] == "40 iterations"


def test_speed_and_time_to_finish_follow_the_iterations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    out = io.StringIO()
    bar = ProgressBar(update_interval=5, bar_length=20, out=out)
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=10, out_dir=tmp_path)
    manager.extend(bar)
    while not manager.stop_trigger:
        with manager.run_iteration():
            now[0] += 0.25  # every iteration takes a quarter of a second on the fake clock
    updates = _updates(out.getvalue())
    assert [float(u["speed"]) for u in updates] == [4.0] * 4
    # 15, 10, 5 and 0 iterations left at 4 per second: 3.75, 2.5, 1.25 and 0 s, rounded.
    assert [u["eta"] for u in updates] == ["0:00:04", "0:00:02", "0:00:01", "0:00:00"]


def test_length_comes_from_an_early_stopping_stop_trigger(tmp_path: Path) -> None:
    out = io.StringIO()
    stop = EarlyStoppingTrigger(monitor="loss", patience=100, max_trigger=(3, "epoch"))
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=4, out_dir=tmp_path, stop_trigger=stop)
    manager.extend(LogReport())
    manager.extend(ProgressBar(update_interval=4, bar_length=20, out=out))
    while not manager.stop_trigger:
        with manager.run_iteration():
            reporting.report({"loss": 1.0})
    assert [u["length"] for u in _updates(out.getvalue())] == ["3 epochs"] * 3


def test_final_state_is_shown_when_the_last_iteration_is_between_updates(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    _run(tmp_path, ProgressBar(update_interval=7, bar_length=20, out=out))
    updates = _updates(out.getvalue())
    assert [u["iteration"] for u in updates] == ["7", "14", "20"]
    assert updates[-1]["total"] == "100.00"


def test_redraws_in_place_on_a_terminal(tmp_path: Path) -> None:
    out = _Terminal()
    _run(tmp_path, ProgressBar(update_interval=10, bar_length=20, out=out))
    text = out.getvalue()
    draws = text.split("\x1b[J")[1:]
    assert len(draws) == 3  # iterations 10 and 20, then the final drawing that stays
    assert all(draw.endswith("\x1b[4A") for draw in draws[:-1])
    assert "\x1b[" not in draws[-1]
    assert _updates(draws[-1])[0]["iteration"] == "20"


def test_shares_the_terminal_with_print_report(tmp_path: Path) -> None:
    out = _Terminal()
    manager = ExtensionsManager(
        {}, {}, 2, iters_per_epoch=5, out_dir=tmp_path, extensions=[LogReport()]
    )
    manager.extend(ProgressBar(update_interval=5, bar_length=20, out=out))
    manager.extend(PrintReport(["epoch"], out=out))
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
    # The table rows clear the bar (drawn below the cursor) before being printed.
    assert "\x1b[4A\x1b[Jepoch\n1\n\x1b[J     total" in out.getvalue()


def test_default_stream_is_the_current_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(tmp_path, ProgressBar(update_interval=10, bar_length=20), epochs=1)
    assert [u["iteration"] for u in _updates(capsys.readouterr().out)] == ["10"]


def test_needs_a_training_length_without_an_interval_stop_trigger(tmp_path: Path) -> None:
    manager = ExtensionsManager(
        {}, {}, 1, iters_per_epoch=2, out_dir=tmp_path, stop_trigger=lambda m: m.iteration > 3
    )
    manager.extend(ProgressBar(out=io.StringIO()))
    with (
        pytest.raises(ValueError, match=r"pass training_length=\(length, 'epoch' or 'iteration'\)"),
        manager.run_iteration(),
    ):
        pass


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"training_length": (10, "epochs")}, r"training_length must be \(length, 'iteration'"),
        ({"training_length": (0, "epoch")}, "positive length, got"),
        ({"training_length": 10}, "got 10"),
        ({"update_interval": 0}, "update_interval must be a positive integer, got 0"),
        ({"bar_length": 2.5}, "bar_length must be a positive integer, got 2.5"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProgressBar(**kwargs)


def test_notebook_variant_updates_its_widgets(tmp_path: Path) -> None:
    bar = ProgressBarNotebook(update_interval=5)
    _run(tmp_path, bar, epochs=2, iters_per_epoch=10)
    assert bar.total_bar.value == 1.0
    assert bar.epoch_bar.value == 1.0
    assert bar.status.value.startswith("20 iter, 2 epoch / 2 epochs<br>")
    assert "Estimated time to finish" in bar.status.value


@pytest.mark.gpu
def test_reporting_cuda_tensors_does_not_synchronize_the_device(tmp_path: Path) -> None:
    model = torch.nn.Linear(32, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device="cuda")
    manager = ExtensionsManager(
        model, optimizer, 1, iters_per_epoch=300, out_dir=tmp_path, extensions=[LogReport()]
    )
    manager.extend(ProgressBar(update_interval=50, out=io.StringIO()))
    manager.extend(PrintReport(out=io.StringIO()))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(299):  # the LogReport reads the values at 300, the end of the epoch
            with manager.run_iteration(step_optimizers=["main"]):
                loss = model(x).square().mean()
                reporting.report({"loss": loss})
                loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    with manager.run_iteration():
        reporting.report({"loss": torch.zeros((), device="cuda")})
    assert manager.get_extension("LogReport").log[0]["iteration"] == 300


def test_default_stream_follows_a_later_redirection(tmp_path: Path) -> None:
    bar = ProgressBar(update_interval=10, bar_length=20)  # created before the redirection
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _run(tmp_path, bar, epochs=1)
    assert [u["iteration"] for u in _updates(buffer.getvalue())] == ["10"]


def test_update_takes_ppe09_arguments_by_keyword() -> None:
    out = io.StringIO()
    bar = ProgressBar(training_length=(2, "epoch"), bar_length=20, out=out)
    bar.update(iteration=15, epoch_detail=1.5)
    (update,) = _updates(out.getvalue())
    assert (update["total"], update["epoch"], update["iteration"], update["epochs"]) == (
        "75.00",
        "50.00",
        "15",
        "1",
    )

    notebook = ProgressBarNotebook(training_length=(2, "epoch"))
    notebook.update(iteration=5, epoch_detail=0.5)
    assert (notebook.total_bar.value, notebook.epoch_bar.value) == (0.25, 0.5)
    assert notebook.status.value.startswith("5 iter, 0 epoch / 2 epochs<br>")


@pytest.mark.parametrize("cls", [ProgressBar, ProgressBarNotebook])
def test_a_subclass_overriding_update_sees_every_update(tmp_path: Path, cls: type) -> None:
    seen: list[tuple[int, float]] = []

    class Recording(cls):  # type: ignore[misc]
        def update(self, iteration: int, epoch_detail: float) -> None:
            seen.append((iteration, epoch_detail))
            super().update(iteration, epoch_detail)

    _run(tmp_path, Recording(update_interval=5, out=io.StringIO()), epochs=2, iters_per_epoch=10)
    assert seen == [(5, 0.5), (10, 1.0), (15, 1.5), (20, 2.0)]


def test_update_before_the_length_is_known_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"training_length=\(length, unit\)"):
        ProgressBar(out=io.StringIO()).update(1, 0.5)
