"""The README's main job trains for real, writes its outputs, and resumes when run again."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_digits.py"
CONFIG = ROOT / "examples" / "config" / "digits.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOG_KEYS = {"train/loss", "train/accuracy", "val/loss", "val/accuracy", "iteration", "elapsed_time"}


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


@pytest.mark.slow
def test_main_job_writes_log_plots_snapshots_and_resumes_exactly(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "result"
    first = train(out, epochs=2)
    log = read_log(out / "log")
    assert [entry["epoch"] for entry in log] == [1, 2]
    assert all(set(entry) >= LOG_KEYS for entry in log)
    assert log[1]["val/loss"] < log[0]["val/loss"]
    assert 0.9 <= log[1]["val/accuracy"] <= 1.0  # the script exits 1 below --min-accuracy 0.9
    for png in ("loss.png", "accuracy.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    snapshots = sorted(p.name for p in out.glob("snapshot_iter_*"))
    iterations = int(re.search(r"after (\d+) iterations", first).group(1))  # type: ignore[union-attr]
    assert f"snapshot_iter_{iterations}" in snapshots

    second = train(out, epochs=3)  # resumes from the epoch-2 snapshot: one more epoch only
    resumed = read_log(out / "log")
    assert [entry["epoch"] for entry in resumed] == [1, 2, 3]
    assert resumed[:2] == log  # the entries of the first run come from its snapshot
    assert f"after {iterations * 3 // 2} iterations" in second
    assert len(list(out.glob("snapshot_iter_*"))) == 2  # n_retains=2

    # The resumed run equals an uninterrupted one (the snapshot carries the RNG state too).
    fresh = tmp_path / "fresh"
    train(fresh, epochs=3)
    assert without_time(resumed) == without_time(read_log(fresh / "log"))


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
    assert sorted(p.name for p in out.glob("snapshot_iter_*")) == [
        "snapshot_iter_60",
        "snapshot_iter_80",
    ]
    (out / "snapshot_iter_80").unlink()  # the newest left is 15 batches into epoch 2

    assert "after 90 iterations" in train(out, 2, "--config", str(config))
    resumed = read_log(out / "log")
    assert resumed[0] == uninterrupted[0]  # from the snapshot (elapsed_time included)
    assert without_time(resumed) == without_time(uninterrupted)


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
