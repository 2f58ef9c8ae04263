"""The plot worker: PlotReport and VariableStatisticsPlot draw off the training path.

The images are drawn by a separate Python process and written from the training thread once
drawn; these tests check that what ends up on disk is what drawing in the training process
gives, in every situation: mid-run, after a flush, at finalize, at interpreter exit, with the
user's matplotlib settings, and when the worker fails or dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.training.extensions._png_worker as png_worker
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import PlotReport, VariableStatisticsPlot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _run(
    tmp_path: Path, extension: Any, epochs: int = 3, n: int | None = None
) -> ExtensionsManager:
    model = torch.nn.Linear(3, 2)
    manager = ExtensionsManager(
        {"main": model}, {}, epochs, iters_per_epoch=4, out_dir=str(tmp_path)
    )
    manager.extend(extension)
    done = 0
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.1 * manager.iteration)
            i = manager.iteration + 1
            reporting.report({"loss": 1.0 / i, "acc": 0.1 * i})
        done += 1
    return manager


_MODEL = torch.nn.Linear(3, 2)


def _plot(**kwargs: Any) -> PlotReport:
    return PlotReport(["loss", "acc"], "epoch", **kwargs)


def _statistics(**kwargs: Any) -> VariableStatisticsPlot:
    return VariableStatisticsPlot(_MODEL, trigger=(2, "iteration"), **kwargs)


@pytest.mark.parametrize("make", [_plot, _statistics], ids=["PlotReport", "VariableStatistics"])
def test_the_worker_draws_the_bytes_the_training_process_draws(tmp_path: Path, make: Any) -> None:
    _run(tmp_path / "worker", make())
    _run(tmp_path / "here", make(background=False))
    (name,) = [path.name for path in (tmp_path / "here").iterdir()]
    drawn_here = (tmp_path / "here" / name).read_bytes()
    assert drawn_here.startswith(PNG_SIGNATURE)
    assert (tmp_path / "worker" / name).read_bytes() == drawn_here


def test_an_image_is_written_at_a_later_call_and_flush_waits_for_it(tmp_path: Path) -> None:
    plot = PlotReport(["loss"], "epoch", filename="loss_{epoch}.png")
    manager = _run(tmp_path, plot, epochs=3, n=4)  # the first epoch's trigger fired
    plot.flush()
    first = (tmp_path / "loss_1.png").read_bytes()
    assert first.startswith(PNG_SIGNATURE)
    reference = PlotReport(["loss"], "epoch", filename="loss_{epoch}.png", background=False)
    _run(tmp_path / "reference", reference, epochs=3)
    assert first == (tmp_path / "reference" / "loss_1.png").read_bytes()
    # The run goes on: every epoch's file is written (files of different names are never
    # merged), the last by finalize.
    while not manager.stop_trigger:
        with manager.run_iteration():
            reporting.report({"loss": 1.0 / (manager.iteration + 1)})
    for epoch in (1, 2, 3):
        assert (tmp_path / f"loss_{epoch}.png").read_bytes() == (
            tmp_path / "reference" / f"loss_{epoch}.png"
        ).read_bytes()


_NO_MATPLOTLIB_HERE = """
import sys, tempfile
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions
out = tempfile.mkdtemp()
manager = ExtensionsManager({}, {}, 2, iters_per_epoch=3, out_dir=out,
                            extensions=[extensions.PlotReport(["loss"], "epoch")])
while not manager.stop_trigger:
    with manager.run_iteration():
        reporting.report({"loss": 1.0 / (manager.iteration + 1)})
import os
print("matplotlib" in sys.modules, os.path.getsize(os.path.join(out, "plot.png")) > 1000)
"""


def test_the_training_process_does_not_import_matplotlib() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_NO_MATPLOTLIB_HERE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.split() == ["False", "True"]


_EXIT_WITHOUT_FINALIZE = """
import sys
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions
manager = ExtensionsManager({}, {}, 10, iters_per_epoch=3, out_dir=sys.argv[1],
                            extensions=[extensions.PlotReport(["loss"], trigger=(1, "iteration"))])
for _ in range(5):  # the loop is left early: the manager is never finalized
    with manager.run_iteration():
        reporting.report({"loss": 1.0 / (manager.iteration + 1)})
"""


def test_images_pending_at_interpreter_exit_are_written(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXIT_WITHOUT_FINALIZE), str(tmp_path)],
        timeout=120,
        check=True,
    )
    reference = PlotReport(["loss"], trigger=(1, "iteration"), background=False)
    manager = ExtensionsManager({}, {}, 10, iters_per_epoch=3, out_dir=str(tmp_path / "ref"))
    manager.extend(reference)
    for _ in range(5):
        with manager.run_iteration():
            reporting.report({"loss": 1.0 / (manager.iteration + 1)})
    assert (tmp_path / "plot.png").read_bytes() == (tmp_path / "ref" / "plot.png").read_bytes()


def test_the_users_matplotlib_settings_apply_in_the_worker(tmp_path: Path) -> None:
    import matplotlib
    from matplotlib import image

    with matplotlib.rc_context({"figure.figsize": (3.0, 2.0), "figure.dpi": 50.0}):
        _run(tmp_path, _plot())
        height, width, _ = image.imread(tmp_path / "plot.png").shape
    assert (width, height) == (150, 100)


def test_a_drawing_error_is_raised_in_the_training_process(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not-a-marker"):
        _run(tmp_path, _plot(marker="not-a-marker"))


def test_a_dead_worker_warns_once_and_plots_are_drawn_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker of this test only (the process's own is left alone), killed mid-run.
    monkeypatch.setattr(png_worker, "_worker", None)
    monkeypatch.setattr(png_worker, "_warned", False)
    plot = _plot()
    manager = _run(tmp_path, plot, n=4)
    plot.flush()
    worker = png_worker._worker
    assert worker is not None and worker.alive
    os.kill(worker.process_id, signal.SIGKILL)
    worker._reader.join(timeout=60)
    assert not worker.alive
    with pytest.warns(RuntimeWarning, match=rf"plot worker \(pid {worker.process_id}\) exited"):
        while not manager.stop_trigger:
            with manager.run_iteration():
                i = manager.iteration + 1
                reporting.report({"loss": 1.0 / i, "acc": 0.1 * i})
    assert (tmp_path / "plot.png").read_bytes() == plot.render()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert png_worker.get_worker() is None  # no second warning
    worker.close()


def test_background_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="background must be a bool, got 'no'"):
        PlotReport(["loss"], background="no")


def test_save_plot_using_module_draws_with_pyplot_now(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    statistics = _statistics(filename="now_{iteration}.png", background=False)
    manager = _run(tmp_path / "run", statistics)
    statistics.save_plot_using_module(pyplot, manager)
    drawn = (tmp_path / "run" / "now_12.png").read_bytes()
    assert drawn.startswith(PNG_SIGNATURE)
    assert drawn == statistics.render()  # the same image as the extension's own drawing
    assert pyplot.get_fignums() == []  # the pyplot figure was closed


def test_state_objects_follow_the_protocol() -> None:
    from pytorch_pfn_extras.training import StateObjectProtocol

    optimizer = torch.optim.SGD(_MODEL.parameters(), lr=0.1)
    assert isinstance(torch.optim.lr_scheduler.StepLR(optimizer, 1), StateObjectProtocol)
    assert not isinstance(object(), StateObjectProtocol)
