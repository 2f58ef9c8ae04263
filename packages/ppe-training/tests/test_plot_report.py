"""PlotReport: PNG plots written through the writer, resumable exactly."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import PlotReport
from pytorch_pfn_extras.writing import ThreadWriter, is_temporary_file

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _values(i: int) -> dict[str, float]:
    return {"loss": 1.0 / i, "val/loss": 2.0 / i, "lr": 0.1 * i}


def _manager(tmp_path: Path, plot: PlotReport, epochs: int = 3, **kwargs: Any) -> ExtensionsManager:
    manager = ExtensionsManager({}, {}, epochs, iters_per_epoch=4, out_dir=tmp_path, **kwargs)
    manager.extend(plot)
    return manager


def _train(manager: ExtensionsManager, n: int | None = None) -> None:
    done = 0
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            reporting.report(_values(manager.iteration + 1))
        done += 1


def _image(path: Path) -> np.ndarray[Any, Any]:
    from matplotlib import image

    return np.asarray(image.imread(path))


def test_writes_a_valid_nonblank_png(tmp_path: Path) -> None:
    _train(_manager(tmp_path, PlotReport(["loss", "val/loss"])))
    path = tmp_path / "plot.png"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert 5_000 < len(data) < 1_000_000
    pixels = _image(path)
    height, width, _ = pixels.shape
    assert 200 < height < 2000 and 300 < width < 3000
    assert pixels.std() > 0.05  # not blank
    colors = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colors) > 20  # two curves, axes, text and grid, antialiased
    assert not [name for name in (p.name for p in tmp_path.iterdir()) if is_temporary_file(name)]


@pytest.mark.parametrize(
    ("x_key", "xs"),
    [
        ("iteration", [4.0, 8.0, 12.0]),
        ("epoch", [1.0, 2.0, 3.0]),
        ("lr", [0.25, 0.65, 1.05]),  # the mean of the reported x values
    ],
)
def test_points_are_interval_means_against_the_x_key(
    tmp_path: Path, x_key: str, xs: list[float]
) -> None:
    plot = PlotReport("loss", x_key)
    _train(_manager(tmp_path, plot))
    expected_y = [sum(1.0 / i for i in range(k * 4 + 1, k * 4 + 5)) / 4 for k in range(3)]
    assert [x for x, _ in plot.data["loss"]] == pytest.approx(xs)
    assert [y for _, y in plot.data["loss"]] == pytest.approx(expected_y)


def test_postprocess_receives_figure_axes_and_data(tmp_path: Path) -> None:
    calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def postprocess(figure: Any, axes: Any, data: dict[str, Any]) -> None:
        axes.set_title("custom title")
        calls.append((figure, axes, {k: list(v) for k, v in data.items()}))

    plot = PlotReport(["loss"], trigger=(2, "iteration"), postprocess=postprocess)
    _train(_manager(tmp_path, plot, epochs=1))
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    assert len(calls) == 2
    figure, axes, data = calls[-1]
    assert isinstance(figure, Figure) and isinstance(axes, Axes)
    assert axes.get_title() == "custom title"
    assert [x for x, _ in data["loss"]] == [2, 4]


def test_filename_is_formatted_and_file_name_is_an_alias(tmp_path: Path) -> None:
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=4, out_dir=tmp_path)
    manager.extend(PlotReport(["loss"], filename="loss_{epoch}.png"))
    manager.extend(PlotReport(["lr"], file_name="lr.png"))
    _train(manager)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["loss_1.png", "loss_2.png", "lr.png"]


def test_a_resumed_run_draws_the_plot_of_the_uninterrupted_one(tmp_path: Path) -> None:
    _train(_manager(tmp_path / "reference", PlotReport(["loss", "val/loss"], "epoch")))
    reference = (tmp_path / "reference" / "plot.png").read_bytes()

    first = _manager(tmp_path / "resumed", PlotReport(["loss", "val/loss"], "epoch"))
    _train(first, n=6)  # one epoch and a half: the summary holds a partial interval
    state = first.state_dict()
    second = _manager(tmp_path / "resumed", PlotReport(["loss", "val/loss"], "epoch"))
    second.load_state_dict(state)
    _train(second)
    assert (tmp_path / "resumed" / "plot.png").read_bytes() == reference


def test_an_asynchronous_writer_writes_the_png(tmp_path: Path) -> None:
    writer = ThreadWriter(out_dir=str(tmp_path))
    _train(_manager(tmp_path, PlotReport(["loss"]), writer=writer))
    assert (tmp_path / "plot.png").read_bytes().startswith(PNG_SIGNATURE)


def test_no_y_keys_writes_nothing(tmp_path: Path) -> None:
    _train(_manager(tmp_path, PlotReport(None), epochs=1))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"y_keys": ["loss"], "colour": "red"},
            TypeError,
            r"unexpected keyword arguments \['colour'\]",
        ),
        (
            {"y_keys": ["loss", 3]},
            TypeError,
            "y_keys and x_key must be strings, got \\[3, 'iteration'\\]",
        ),
        ({"y_keys": "loss", "filename": ""}, ValueError, "filename must be a non-empty string"),
        ({"y_keys": "loss", "postprocess": 1}, TypeError, "postprocess must be callable"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PlotReport(**kwargs)


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert not PlotReport.available()
    with pytest.raises(
        ImportError, match=r'PlotReport needs matplotlib: pip install "ppe-training\[plot\]"'
    ):
        PlotReport(["loss"])


_BACKEND_PROBE = """
import sys, tempfile
import matplotlib
matplotlib.use("svg")
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions
print("import", "matplotlib.figure" in sys.modules)
manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tempfile.mkdtemp(),
                            extensions=[extensions.PlotReport(["loss"])])
while not manager.stop_trigger:
    with manager.run_iteration():
        reporting.report({"loss": 1.0})
print("after", matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""


def test_leaves_the_users_backend_and_pyplot_alone() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_BACKEND_PROBE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.split("\n")[:2] == ["import False", "after svg False"]


def test_render_returns_the_png_bytes(tmp_path: Path) -> None:
    plot = PlotReport(["loss"], marker=None, grid=False)
    _train(_manager(tmp_path, plot, epochs=1))
    data = plot.render()
    assert data.startswith(PNG_SIGNATURE)
    assert data == (tmp_path / "plot.png").read_bytes()
