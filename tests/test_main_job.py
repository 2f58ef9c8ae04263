"""The README's main job trains for real, writes its outputs, and resumes when run again."""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys

import pytest
from PIL import Image  # a dependency of matplotlib, which the plots need

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_digits.py"
CONFIG = ROOT / "examples" / "config" / "digits.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOG_KEYS = {
    "train/loss",
    "train/accuracy",
    "val/loss",
    "val/accuracy",
    "lr",
    "iteration",
    "elapsed_time",
}
# ParameterStatistics of the three Linear layers of the MLP, with digits.yaml's statistics.
STATS_KEYS = {
    f"stats/net.{layer}.{param}/{kind}/{statistic}"
    for layer in (0, 3, 6)
    for param in ("weight", "bias")
    for kind in ("data", "grad")
    for statistic in ("mean", "std", "min", "max")
}
PLOTS = ("loss.png", "accuracy.png", "statistics.png")
BEST = re.compile(r"best validation accuracy: (\d\.\d+) at epoch (\d+)")


def train(out: pathlib.Path, epochs: int, *options: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(SCRIPT),
            "--out",
            str(out),
            "--epochs",
            str(epochs),
            "--quiet",
            *options,
        ],
        capture_output=True,
        text=True,
        env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def read_log(path: pathlib.Path) -> list[dict[str, float]]:
    log: list[dict[str, float]] = json.loads(path.read_text())
    return log


def without_time(log: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in entry.items() if k != "elapsed_time"} for entry in log]


def read_png(path: pathlib.Path) -> tuple[bytes, tuple[int, int]]:
    """Return the bytes and the (width, height) of a PNG file that decodes completely."""
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000, path
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()  # decodes every pixel: fails on a truncated or corrupted file
        return data, image.size


def assert_best_is_the_logs_maximum(stdout: str, log: list[dict[str, float]]) -> None:
    match = BEST.search(stdout)
    assert match, stdout
    best = max(log, key=lambda entry: entry["val/accuracy"])  # the first of equal values
    assert float(match.group(1)) == pytest.approx(best["val/accuracy"], abs=5e-4)
    assert int(match.group(2)) == best["epoch"]


@pytest.mark.slow
def test_main_job_writes_log_plots_snapshots_and_resumes_exactly(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "result"
    first = train(out, epochs=2)
    log = read_log(out / "log")
    assert [entry["epoch"] for entry in log] == [1, 2]
    assert all(set(entry) == LOG_KEYS | STATS_KEYS | {"epoch"} for entry in log)
    assert log[1]["val/loss"] < log[0]["val/loss"]
    assert 0.9 <= log[1]["val/accuracy"] <= 1.0  # the script exits 1 below --min-accuracy 0.9
    assert_best_is_the_logs_maximum(first, log)
    # The lr each epoch trained with: digits.yaml's cosine from 0.1 over T_max = 20 epochs.
    assert [entry["lr"] for entry in log] == pytest.approx(
        [0.1 * (1 + math.cos(math.pi * epoch / 20)) / 2 for epoch in range(2)]
    )
    for entry in log:  # ParameterStatistics: min < mean < max and a positive, finite std
        for kind in ("data", "grad"):
            stats = {s: entry[f"stats/net.0.weight/{kind}/{s}"] for s in ("min", "mean", "max")}
            assert stats["min"] < stats["mean"] < stats["max"]
            assert 0 < entry[f"stats/net.0.weight/{kind}/std"] < math.inf
    images = {png: read_png(out / png) for png in PLOTS}
    width, height = images["statistics.png"][1]
    assert width > 2 * height  # two panels side by side: the values and the gradients
    snapshots = sorted(p.name for p in out.glob("snapshot_iter_*"))
    iterations = int(re.search(r"after (\d+) iterations", first).group(1))  # type: ignore[union-attr]
    assert f"snapshot_iter_{iterations}" in snapshots

    second = train(out, epochs=3)  # resumes from the epoch-2 snapshot: one more epoch only
    resumed = read_log(out / "log")
    assert [entry["epoch"] for entry in resumed] == [1, 2, 3]
    assert resumed[:2] == log  # the entries of the first run come from its snapshot
    assert f"after {iterations * 3 // 2} iterations" in second
    assert len(list(out.glob("snapshot_iter_*"))) == 2  # n_retains=2
    assert_best_is_the_logs_maximum(second, resumed)  # MaxValue's state resumed too

    # The resumed run equals an uninterrupted one (the snapshot carries the RNG state, the
    # scheduler's and every extension's state too): the same log, lr included, and the same
    # plots, byte for byte.
    fresh = tmp_path / "fresh"
    train(fresh, epochs=3)
    assert without_time(resumed) == without_time(read_log(fresh / "log"))
    for png in PLOTS:
        assert read_png(out / png) == read_png(fresh / png), png


@pytest.mark.slow
def test_main_job_resumes_exactly_from_a_snapshot_in_the_middle_of_an_epoch(
    tmp_path: pathlib.Path,
) -> None:
    # 1,438 training images in batches of 32: 45 iterations per epoch; a snapshot every 20.
    config = tmp_path / "mid_epoch.yaml"
    config.write_text(f"import: {CONFIG}\nextensions:\n  snapshot_trigger: [20, iteration]\n")
    out = tmp_path / "result"
    assert "after 90 iterations" in train(out, 2, "--config", str(config))
    uninterrupted = read_log(out / "log")
    uninterrupted_images = {png: read_png(out / png) for png in PLOTS}
    assert sorted(p.name for p in out.glob("snapshot_iter_*")) == [
        "snapshot_iter_60",
        "snapshot_iter_80",
    ]
    (out / "snapshot_iter_80").unlink()  # the newest left is 15 batches into epoch 2

    assert "after 90 iterations" in train(out, 2, "--config", str(config))
    resumed = read_log(out / "log")
    assert resumed[0] == uninterrupted[0]  # from the snapshot (elapsed_time included)
    assert without_time(resumed) == without_time(uninterrupted)
    for png in PLOTS:  # statistics.png: the sample of every iteration, from the snapshot
        assert read_png(out / png) == uninterrupted_images[png], png


@pytest.mark.slow
def test_optuna_search_example_runs_a_study_over_the_main_jobs_config(
    tmp_path: pathlib.Path,
) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "config" / "optuna_search.py"),
            "--trials",
            "2",
            "--storage",
            storage,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    import optuna

    study = optuna.load_study(study_name=None, storage=storage)
    assert len(study.trials) == 2
    assert 0.0 < study.best_value <= 1.0
