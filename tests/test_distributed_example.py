"""The README's main job on two processes: under torchrun, and under OpenMPI's mpirun.

``examples/train_digits.py`` trains data parallel when a launcher starts it several times: each
rank trains on its share of the images, the evaluator and the LogReport report the means over
all ranks, rank 0 writes the outputs and the snapshots, and every rank resumes from them.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_digits.py"
KEYS = {"train/loss", "train/accuracy", "val/loss", "val/accuracy", "lr", "epoch", "iteration"}


def _env() -> dict[str, str]:
    return {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


Torchrun = Callable[..., "subprocess.CompletedProcess[str]"]


def _train(torchrun: Torchrun, out: pathlib.Path, epochs: int) -> str:
    result = torchrun(
        2,
        SCRIPT,
        *("--out", str(out), "--epochs", str(epochs), "--quiet", "--min-accuracy", "0.8"),
        env={"MPLBACKEND": "Agg"},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def _printed_results(stdout: str) -> int:
    return sum(line.startswith("validation accuracy:") for line in stdout.splitlines())


def _check_outputs(out: pathlib.Path, epochs: int) -> list[dict[str, float]]:
    log: list[dict[str, float]] = json.loads((out / "log").read_text())
    assert [entry["epoch"] for entry in log] == list(range(1, epochs + 1))
    # 1,438 training images, 16 per rank and iteration on 2 ranks: 45 iterations an epoch,
    # as one process with batches of 32.
    assert [entry["iteration"] for entry in log] == [45 * e for e in range(1, epochs + 1)]
    assert all(set(entry) >= KEYS for entry in log)
    assert log[-1]["val/loss"] < log[0]["val/loss"]
    for png in ("loss.png", "accuracy.png", "statistics.png"):
        assert (out / png).stat().st_size > 10_000
    return log


@pytest.mark.slow
def test_main_job_trains_under_torchrun_and_resumes_on_every_rank(
    tmp_path: pathlib.Path, torchrun: Torchrun
) -> None:
    out = tmp_path / "result"
    first = _train(torchrun, out, epochs=2)
    assert _printed_results(first) == 1  # only rank 0 prints
    log = _check_outputs(out, epochs=2)
    assert sorted(p.name for p in out.glob("snapshot_iter_*")) == [
        "snapshot_iter_45",
        "snapshot_iter_90",
    ]
    second = _train(torchrun, out, epochs=3)  # every rank loads rank 0's epoch-2 snapshot
    assert "after 135 iterations" in second
    resumed = _check_outputs(out, epochs=3)
    assert resumed[:2] == log
    assert resumed[-1]["val/accuracy"] >= 0.8


@pytest.mark.mpi
@pytest.mark.slow
def test_main_job_trains_under_mpirun(
    tmp_path: pathlib.Path, mpirun: str, free_port: Callable[[], int]
) -> None:
    out = tmp_path / "result"
    result = subprocess.run(
        [
            mpirun,
            "-n",
            "2",
            "--allow-run-as-root",
            "--oversubscribe",
            "-x",
            "MASTER_ADDR=127.0.0.1",
            "-x",
            f"MASTER_PORT={free_port()}",
            "-x",
            "MPLBACKEND",
            "-x",
            "OMP_NUM_THREADS",
            "-x",
            "PYTHONWARNINGS",
            sys.executable,
            str(SCRIPT),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--quiet",
            "--min-accuracy",
            "0.7",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _printed_results(result.stdout) == 1
    _check_outputs(out, epochs=2)
