"""VariableStatisticsPlot, ProfileReport and TimelineTrace with a real manager."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import pytorch_pfn_extras.profiler
import pytorch_pfn_extras.training
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.profiler import get_time_summary, load_chrome_trace_as_json, record
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport, snapshot
from pytorch_pfn_extras.training.extensions.profile_report import ProfileReport
from pytorch_pfn_extras.training.extensions.timeline_trace import TimelineTrace
from pytorch_pfn_extras.training.extensions.variable_statistics_plot import (
    Reservoir,
    Statistician,
    VariableStatisticsPlot,
    percentile,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIGMAS = (0, 0.13, 2.28, 15.87, 50, 84.13, 97.72, 99.87, 100)


def _manager(
    tmp_path: Path, *extensions: Any, epochs: int = 2, iters_per_epoch: int = 5, **kwargs: Any
) -> ExtensionsManager:
    model = torch.nn.Linear(8, 4)
    manager = ExtensionsManager(
        {"main": model},
        {},
        epochs,
        iters_per_epoch=iters_per_epoch,
        out_dir=str(tmp_path),
        **kwargs,
    )
    for extension in extensions:
        manager.extend(extension)
    return manager


def _train_linear(model: torch.nn.Module, manager: ExtensionsManager) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(0)
    while not manager.stop_trigger:
        with manager.run_iteration():
            optimizer.zero_grad()
            loss = model(torch.randn(16, 8)).pow(2).mean()
            loss.backward()
            optimizer.step()


# ---------------------------------------------------------------- VariableStatisticsPlot


def test_statistician_matches_numpy() -> None:
    x = np.random.default_rng(0).normal(size=(50, 3))
    stats = Statistician(True, True, SIGMAS)(x, axis=0)
    np.testing.assert_allclose(stats["mean"], x.mean(axis=0))
    np.testing.assert_allclose(stats["std"], x.std(axis=0))
    np.testing.assert_allclose(stats["percentile"], np.percentile(x, SIGMAS, axis=0))
    np.testing.assert_allclose(percentile(torch.from_numpy(x), 50, axis=0), np.median(x, axis=0))
    assert set(Statistician(False, True, ())(x)) == {"std"}


def test_reservoir_keeps_a_uniform_sample_of_bounded_size() -> None:
    reservoir = Reservoir(10, data_shape=(2,))
    for i in range(5):
        reservoir.add(np.full(2, i), idx=i)
    idxs, data = reservoir.get_data()
    assert idxs.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(data[:, 0], idxs)
    counts = np.zeros(100)
    for run in range(200):
        reservoir = Reservoir(10, data_shape=(1,), seed=run)
        for i in range(100):
            reservoir.add([i], idx=i)
        idxs, data = reservoir.get_data()
        assert len(idxs) == 10 and list(idxs) == sorted(idxs)
        np.testing.assert_array_equal(data[:, 0], idxs)
        counts[idxs] += 1
    # Each item is kept with probability 0.1: 20 times on average over 200 runs.
    assert counts[:50].mean() == pytest.approx(20, rel=0.25)
    assert counts[50:].mean() == pytest.approx(20, rel=0.25)


def test_reservoir_sample_is_reproducible_and_resumes_through_torch_load(tmp_path: Any) -> None:
    def stream(reservoir: Reservoir, items: range) -> None:
        for i in items:
            reservoir.add([i], idx=i)

    whole = Reservoir(10, data_shape=(1,))
    stream(whole, range(300))
    again = Reservoir(10, data_shape=(1,))
    stream(again, range(300))
    assert whole.get_data()[0].tolist() == again.get_data()[0].tolist()

    first = Reservoir(10, data_shape=(1,))
    stream(first, range(120))
    torch.save(first.state_dict(), tmp_path / "reservoir.pt")
    resumed = Reservoir(10, data_shape=(1,))
    resumed.load_state_dict(torch.load(tmp_path / "reservoir.pt", weights_only=True))
    stream(resumed, range(120, 300))
    assert resumed.get_data()[0].tolist() == whole.get_data()[0].tolist()


def test_statistics_are_means_over_tensors_of_numpy_statistics() -> None:
    model = torch.nn.Linear(8, 4)
    model(torch.randn(3, 8)).sum().backward()
    plot = VariableStatisticsPlot(model)
    stats = plot.statistics()
    for key, tensors in (
        ("data", [p.detach().numpy().ravel() for p in model.parameters()]),
        ("grad", [p.grad.numpy().ravel() for p in model.parameters() if p.grad is not None]),
    ):
        np.testing.assert_allclose(
            stats[key]["mean"], np.mean([t.mean() for t in tensors]), rtol=1e-6
        )
        np.testing.assert_allclose(
            stats[key]["std"], np.mean([t.std() for t in tensors]), rtol=1e-6
        )
        expected = np.mean([np.percentile(t, SIGMAS) for t in tensors], axis=0)
        np.testing.assert_allclose(stats[key]["percentile"], expected, rtol=1e-5, atol=1e-7)


def _read_png(path: Path) -> np.ndarray[Any, Any]:
    from matplotlib import image

    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    return np.asarray(image.imread(path))


@pytest.mark.parametrize(
    ("kwargs", "panels"),
    [({}, 2), ({"report_grad": False}, 1), ({"plot_std": False, "figsize": (6, 3)}, 2)],
)
def test_writes_png_with_a_drawn_panel_per_kind(
    tmp_path: Path, kwargs: dict[str, Any], panels: int
) -> None:
    manager = _manager(tmp_path)
    model = manager.raw_models["main"]
    manager.extend(VariableStatisticsPlot(model, filename="stats_{iteration}.png", **kwargs))
    _train_linear(model, manager)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats_10.png", "stats_5.png"]
    pixels = _read_png(tmp_path / "stats_10.png")
    height, width = pixels.shape[:2]
    inches = kwargs.get("figsize", (6.4 * panels, 4.8))
    assert (height, width) == (round(inches[1] * 100), round(inches[0] * 100))  # dpi 100
    for panel in np.array_split(pixels[:, :, :3], panels, axis=1):
        inner = panel[height // 5 : -height // 5, panel.shape[1] // 5 : -panel.shape[1] // 5]
        blue = (inner[..., 2] > inner[..., 0] + 0.15).mean()  # the percentile bands
        assert blue > 0.02
        assert len(np.unique(inner.reshape(-1, 3), axis=0)) > 20


def test_state_round_trip_resumes_the_sample(tmp_path: Path) -> None:
    model = torch.nn.Linear(8, 4)
    plot = VariableStatisticsPlot(model, max_sample_size=3)
    manager = _manager(tmp_path, epochs=1)
    manager.extend(plot)
    _train_linear(model, manager)
    state = plot.state_dict()
    other = VariableStatisticsPlot(model, max_sample_size=3)
    other.load_state_dict(state)
    for a, b in zip(plot._reservoir.get_data(), other._reservoir.get_data(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert other.state_dict()["plot_trigger"] == state["plot_trigger"]
    assert len(plot._reservoir.get_data()[0]) == 3


def test_rejects_unknown_arguments_and_empty_plots() -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        VariableStatisticsPlot(torch.zeros(3), bogus=1)
    with pytest.raises(ValueError, match="nothing to plot"):
        VariableStatisticsPlot(torch.zeros(3), report_data=False, report_grad=False)
    with pytest.raises(TypeError, match="targets"):
        VariableStatisticsPlot("weights")


# ---------------------------------------------------------------- ProfileReport


@pytest.fixture
def time_summary() -> Iterator[None]:
    get_time_summary().summary(clear=True)
    yield
    get_time_summary().summary(clear=True)


def _train_recorded(manager: ExtensionsManager, sleeps: list[float]) -> None:
    """Each iteration, a ``record("sleep")`` section lasting ``sleeps[i]`` on a fake clock
    (no wall-clock time), and the same duration added directly as ``fixed``."""
    summary = get_time_summary()
    now = [1000.0]
    clock, summary.clock = summary.clock, lambda: now[0]
    try:
        while not manager.stop_trigger:
            with manager.run_iteration():
                with record("sleep"):
                    now[0] += sleeps[manager.iteration]
                summary.add("fixed", sleeps[manager.iteration])
                reporting.report({"loss": 1.0})
    finally:
        summary.clock = clock


@pytest.mark.usefixtures("time_summary")
def test_profile_report_reports_and_logs_record_timings(tmp_path: Path) -> None:
    sleeps = [0.002, 0.01, 0.004, 0.006]
    profile = ProfileReport(trigger=(2, "iteration"), filename="profile.jsonl", append=True)
    log = LogReport(trigger=(2, "iteration"))
    manager = _manager(tmp_path, profile, log, epochs=1, iters_per_epoch=4)
    _train_recorded(manager, sleeps)
    lines = (tmp_path / "profile.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["iteration"] for e in entries] == [2, 4]
    for entry, pair in zip(entries, (sleeps[:2], sleeps[2:]), strict=True):
        assert entry["fixed"] == pytest.approx(np.mean(pair))
        assert (entry["fixed.min"], entry["fixed.max"]) == (min(pair), max(pair))
        # Measured by record() on the fake clock: exactly the durations.
        assert entry["sleep"] == pytest.approx(np.mean(pair))
        assert (entry["sleep.min"], entry["sleep.max"]) == pytest.approx((min(pair), max(pair)))
    assert profile.log == entries
    # The timings were reported into the observation: the LogReport sees them.
    assert [e["sleep.max"] for e in log.log] == [e["sleep.max"] for e in entries]
    assert [e["fixed"] for e in log.log] == [e["fixed"] for e in entries]


@pytest.mark.usefixtures("time_summary")
def test_profile_report_filters_keys_and_writes_nothing_without_filename(tmp_path: Path) -> None:
    profile = ProfileReport(store_keys=["sleep"], report_keys=["sleep.max"])
    log = LogReport()
    manager = _manager(tmp_path, profile, log, epochs=1)
    _train_recorded(manager, [0.001] * 5)
    assert list(tmp_path.iterdir()) == [tmp_path / "log"]
    (entry,) = profile.log
    assert set(entry) == {"sleep", "epoch", "iteration", "elapsed_time"}
    assert "sleep.max" in log.log[0] and "sleep" not in log.log[0]
    other = ProfileReport()
    other.load_state_dict(profile.state_dict())
    assert other.log == profile.log


# ---------------------------------------------------------------- TimelineTrace


@pytest.fixture
def tracer() -> Iterator[None]:
    pytorch_pfn_extras.profiler.clear_tracer()
    yield
    pytorch_pfn_extras.profiler.clear_tracer()


def _check_trace_format(events: list[Any]) -> None:
    assert events
    for event in events:
        assert isinstance(event["name"], str) and event["name"]
        assert event["ph"] in {"X", "B", "E", "i", "I", "M", "C"}
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert isinstance(event["ts"], (int, float)) and event["ts"] > 0
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0


@pytest.mark.usefixtures("tracer")
def test_timeline_trace_writes_a_chrome_trace(tmp_path: Path) -> None:
    timeline = TimelineTrace(trigger=(1, "epoch"))
    manager = _manager(tmp_path, timeline, LogReport(), enable_trace=True)
    # After the first epoch: an open JSON array, which Chrome and Perfetto load.
    while manager.iteration < 5:
        with manager.run_iteration(), record("step", trace=True):
            reporting.report({"loss": 1.0})
    text = (tmp_path / "chrome_trace.json").read_text()
    assert text.startswith("[") and text.rstrip().endswith(",")
    partial = json.loads(text.rstrip().rstrip(",") + "]")
    _check_trace_format(partial)
    while not manager.stop_trigger:
        with manager.run_iteration(), record("step", trace=True):
            reporting.report({"loss": 1.0})
    # After training: a complete JSON document.
    events = json.loads((tmp_path / "chrome_trace.json").read_text())
    assert isinstance(events, list)
    _check_trace_format(events)
    assert events == load_chrome_trace_as_json(tmp_path / "chrome_trace.json")
    names = [event["name"] for event in events]
    assert names.count("step") == 10
    assert names.count("extension:LogReport") == 10
    assert names.count("extension:TimelineTrace") >= 4
    assert events[-1]["ph"] == "M"
    steps = [e for e in events if e["name"] == "step"]
    assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(steps))


@pytest.mark.usefixtures("tracer")
def test_timeline_trace_enable_disable_triggers_and_state(tmp_path: Path) -> None:
    from pytorch_pfn_extras.training.triggers import ManualScheduleTrigger

    timeline = TimelineTrace(
        filename="t.json",
        enable=ManualScheduleTrigger(3, "iteration"),
        disable=ManualScheduleTrigger(6, "iteration"),
    )
    manager = _manager(tmp_path, timeline)
    while not manager.stop_trigger:
        with manager.run_iteration(), record("step", trace=True):
            pass
    events = load_chrome_trace_as_json(tmp_path / "t.json")
    _check_trace_format(events)
    # As in PPE 0.9, recording is on from the start; ``disable`` turns it off at the end of
    # iteration 6 (``enable``, at iteration 3, finds it on already).
    assert [e["name"] for e in events].count("step") == 6
    state = timeline.state_dict()
    assert state["tracer"]["events"] == []
    other = TimelineTrace(enable=(1, "epoch"))
    other.load_state_dict(state)
    assert other.state_dict()["tracer"] == state["tracer"]


def test_subpackages_import_explicitly() -> None:
    assert pytorch_pfn_extras.training.ExtensionsManager is ExtensionsManager


def test_variable_statistics_plot_resumes_from_an_autoloaded_snapshot(tmp_path: Any) -> None:
    def run(stop: int | None) -> VariableStatisticsPlot:
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        plot = VariableStatisticsPlot(model, max_sample_size=3)
        manager = ExtensionsManager(
            model,
            optimizer,
            3,
            iters_per_epoch=4,
            out_dir=tmp_path / ("whole" if stop is None and not runs else "resumed"),
            extensions=[plot, snapshot(autoload=True)],
        )
        while not manager.stop_trigger and (stop is None or manager.iteration < stop):
            with manager.run_iteration():
                optimizer.zero_grad()
                model(torch.ones(1, 2) * manager.iteration).sum().backward()
                optimizer.step()
        runs.append(stop)
        return plot

    runs: list[int | None] = []
    whole = run(None)
    run(4)  # snapshot at the end of epoch 1 (weights_only loading of the reservoir's state)
    resumed = run(None)
    (i1, d1), (i2, d2) = whole._reservoir.get_data(), resumed._reservoir.get_data()
    assert i1.tolist() == i2.tolist()
    np.testing.assert_allclose(d1, d2)
