"""A trainer killed (SIGKILL) in the middle of an epoch resumes to the weights of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("engine_resume_run.py")


def run(out_dir: Path, kill_at: int | None = None) -> int:
    args = [sys.executable, str(SCRIPT), str(out_dir)]
    if kill_at is not None:
        args.append(str(kill_at))
    process = subprocess.run(
        args, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONHASHSEED": "0"}
    )
    if process.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"training failed ({process.returncode}):\n{process.stderr}")
    return process.returncode


@pytest.mark.parametrize("kills", [(7,), (11, 16)])  # mid-epoch (snapshots at 6, 9, 15)
def test_mid_epoch_resume_after_sigkill_ends_like_an_uninterrupted_run(
    tmp_path: Path, kills: tuple[int, ...]
) -> None:
    reference = tmp_path / "reference"
    assert run(reference) == 0
    resumed = tmp_path / "resumed"
    for kill_at in kills:
        assert run(resumed, kill_at) == -signal.SIGKILL
    assert run(resumed) == 0

    expected = torch.load(reference / "final.pt", weights_only=True)
    actual = torch.load(resumed / "final.pt", weights_only=True)
    for name, value in expected.items():
        assert torch.equal(value, actual[name]), name
    # The resumed log's entries (per epoch, from the snapshot's LogReport state) match too.
    assert (reference / "log.jsonl").read_text().count("\n") == 3
    ref_lines = [
        line.split('"elapsed_time"')[0]
        for line in (reference / "log.jsonl").read_text().splitlines()
    ]
    res_lines = [
        line.split('"elapsed_time"')[0] for line in (resumed / "log.jsonl").read_text().splitlines()
    ]
    assert res_lines[-len(ref_lines) :] == ref_lines
