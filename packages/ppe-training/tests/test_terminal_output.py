"""PrintReport and ProgressBar print exactly what a user sees in a terminal."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, PrintReport, ProgressBar


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


def _train(tmp_path: Path, *extensions: Any, clock: FakeClock | None = None) -> None:
    manager = ExtensionsManager(
        {}, {}, 2, iters_per_epoch=4, out_dir=tmp_path, extensions=list(extensions)
    )
    while not manager.stop_trigger:
        with manager.run_iteration():
            if clock is not None:
                clock.now += 0.5  # the iteration's work takes half a second
            reporting.report({"loss": 1.0 / (manager.iteration + 1), "accuracy": 0.25})


def test_print_report_prints_this_exact_table(tmp_path: Path) -> None:
    out = io.StringIO()
    _train(tmp_path, LogReport(), PrintReport(["epoch", "iteration", "loss", "accuracy"], out=out))
    assert out.getvalue() == (
        "epoch       iteration   loss        accuracy\n"
        "1           4           0.520833    0.25\n"
        "2           8           0.158631    0.25\n"
    )


def test_progress_bar_prints_this_exact_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    out = io.StringIO()
    _train(tmp_path, ProgressBar(update_interval=4, bar_length=10, out=out), clock=clock)
    assert out.getvalue() == (
        "     total [#####.....]  50.00%\n"
        "this epoch [##########] 100.00%\n"
        "         4 iter, 1 epoch / 2 epochs\n"
        "         2 iters/sec. Estimated time to finish: 0:00:02.\n"  # 4 more at 2/s
        "     total [##########] 100.00%\n"
        "this epoch [##########] 100.00%\n"
        "         8 iter, 2 epoch / 2 epochs\n"
        "         2 iters/sec. Estimated time to finish: 0:00:00.\n"
    )
