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
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train(out: pathlib.Path, epochs: int) -> str:
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
        ],
        capture_output=True,
        text=True,
        env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
def test_main_job_writes_log_plots_snapshots_and_resumes_exactly(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "result"
    first = train(out, epochs=2)
    log = json.loads((out / "log").read_text())
    assert [entry["epoch"] for entry in log] == [1, 2]
    assert {"train/loss", "val/loss", "val/accuracy", "iteration", "elapsed_time"} <= set(log[0])
    assert log[1]["val/loss"] < log[0]["val/loss"]
    for png in ("loss.png", "accuracy.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    snapshots = sorted(p.name for p in out.glob("snapshot_iter_*"))
    iterations = int(re.search(r"after (\d+) iterations", first).group(1))  # type: ignore[union-attr]
    assert f"snapshot_iter_{iterations}" in snapshots

    second = train(out, epochs=3)  # resumes from the epoch-2 snapshot: one more epoch only
    log = json.loads((out / "log").read_text())
    assert [entry["epoch"] for entry in log] == [1, 2, 3]
    assert f"after {iterations * 3 // 2} iterations" in second
    assert len(list(out.glob("snapshot_iter_*"))) == 2  # n_retains=2

    # The resumed run equals an uninterrupted one (the snapshot carries the RNG state too).
    fresh = tmp_path / "fresh"
    train(fresh, epochs=3)

    def without_time(path: pathlib.Path) -> list[dict[str, float]]:
        entries = json.loads(path.read_text())
        return [{k: v for k, v in e.items() if k != "elapsed_time"} for e in entries]

    assert without_time(out / "log") == without_time(fresh / "log")


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
