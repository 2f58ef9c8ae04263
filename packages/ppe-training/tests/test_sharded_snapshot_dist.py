"""Sharded snapshots across real processes: ``python -m torch.distributed.run`` with gloo on
127.0.0.1, 1, 2 and 4 ranks of sharded_train.py (FSDP2 ``fully_shard``, DDP, plain models)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

SCRIPT = Path(__file__).with_name("sharded_train.py")
TIMEOUT = 240  # a hung collective would exceed the ranks' own timeouts (seconds) by far


Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run(
    free_port: Callable[[], int], torchrun: Callable[..., subprocess.CompletedProcess[str]]
) -> Run:
    """``run(out, ranks, *args, expect_failure=False)``: sharded_train.py on ``ranks``
    processes (0: one process without torchrun), checked to succeed (or to fail)."""

    def run_script(
        out: Path, ranks: int, *args: str, expect_failure: bool = False
    ) -> subprocess.CompletedProcess[str]:
        env = {"PYTHONWARNINGS": "default"}  # the tests read the warnings
        if ranks:
            launcher = ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
            process = torchrun(
                ranks,
                SCRIPT,
                str(out),
                *args,
                launcher=[*launcher, "--max-restarts", "0"],
                env=env,
                timeout=TIMEOUT,
                rerun_from=out,
            )
        else:
            process = subprocess.run(
                [sys.executable, str(SCRIPT), str(out), *args],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                check=False,
            )
        if expect_failure:
            assert process.returncode != 0, process.stdout[-3000:]
        else:
            assert process.returncode == 0, process.stderr[-6000:]
        return process

    return run_script


def _result(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_fsdp_snapshot_of_4_ranks_resumes_on_2_then_on_1(
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    run: Run,
) -> None:
    run(tmp_path, 4, "--model", "fsdp", "--stop-at", "5")
    assert (tmp_path / "snapshot_iter_4" / "__3_0.distcp").exists()
    second = run(tmp_path, 2, "--model", "fsdp", "--async-save", "--stop-at", "9")
    # A state object that differs per rank cannot be taken over by another world size.
    assert "written by 4 ranks and is loaded by 2: [\"state_objects['note']\"]" in second.stderr
    run(tmp_path, 1, "--model", "fsdp", "--result", str(tmp_path / "result.pt"))
    result = _result(tmp_path / "result.pt")
    assert result["resumed_from"] == str(tmp_path / "snapshot_iter_8")
    assert_same_training(result, sharded_reference)
    log = (tmp_path / "log").read_text()
    assert log.count('"iteration":') == 12


@pytest.mark.slow
def test_async_plain_snapshot_of_2_ranks_resumes_with_ddp_on_4_and_without_a_process_group(
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    run: Run,
) -> None:
    run(tmp_path, 2, "--async-save", "--n-retains", "2", "--stop-at", "7")
    assert sorted(p.name for p in tmp_path.glob("snapshot_iter_*")) == [
        "snapshot_iter_4",
        "snapshot_iter_6",
    ]
    run(tmp_path, 4, "--model", "ddp", "--async-save", "--stop-at", "9")
    run(tmp_path, 0, "--result", str(tmp_path / "result.pt"))
    result = _result(tmp_path / "result.pt")
    assert result["resumed_from"] == str(tmp_path / "snapshot_iter_8")
    assert_same_training(result, sharded_reference)


@pytest.mark.slow
def test_sigkill_of_a_rank_mid_save_resumes_from_the_last_complete_snapshot(
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    run: Run,
) -> None:
    killed = run(
        tmp_path,
        2,
        "--model",
        "fsdp",
        "--kill-rank",
        "0",
        "--kill-at",
        "6",
        "--timeout",
        "10",
        expect_failure=True,
    )
    # Rank 0, the saver rank that commits (and would remove the temporary of a failed write),
    # died after writing its shard of snapshot_iter_6; rank 1 failed with an error.
    assert "Signal 9 (SIGKILL) received" in killed.stderr or "exitcode: -9" in killed.stderr
    assert "RANK 0 DONE" not in killed.stdout
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if n.startswith("snapshot")] == ["snapshot_iter_2", "snapshot_iter_4"]
    assert any(n.startswith(".snapshot_iter_6.tmp-") for n in names)
    run(tmp_path, 2, "--model", "fsdp", "--result", str(tmp_path / "result.pt"))
    result = _result(tmp_path / "result.pt")
    assert result["resumed_from"] == str(tmp_path / "snapshot_iter_4")
    assert not any(p.name.startswith(".snapshot_iter_6.tmp-") for p in tmp_path.iterdir())
    assert_same_training(result, sharded_reference)


@pytest.mark.slow
def test_missing_shard_and_missing_rank_are_errors_on_every_rank_not_hangs(
    tmp_path: Path,
    run: Run,
) -> None:
    run(tmp_path, 2, "--model", "fsdp", "--stop-at", "3")
    (tmp_path / "snapshot_iter_2" / "__1_0.distcp").unlink()
    failed = run(tmp_path, 2, "--model", "fsdp", "--timeout", "5", expect_failure=True)
    message = "is incomplete: __1_0.distcp (written by rank 1) is missing"
    assert "[rank0]: FileNotFoundError" in failed.stderr
    assert "[rank1]: FileNotFoundError" in failed.stderr
    assert failed.stderr.count(message) >= 2

    # A rank that skips a collective snapshot is named by the others, within the timeout.
    skipped = run(tmp_path / "skip", 2, "--skip-rank", "1", "--timeout", "4", expect_failure=True)
    assert "Ranks 1 failed to pass monitoredBarrier" in skipped.stderr
    assert "not every rank of 2 reached the snapshot 'snapshot_iter_2' within 4 s" in skipped.stderr


@pytest.mark.slow
def test_a_ppe09_distributed_snapshot_resumes_on_2_ranks_and_is_kept(
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    run: Run,
) -> None:
    # A PPE 0.9 job in SnapshotMode.DISTRIBUTED left one file, written by the saver rank.
    run(tmp_path, 2, "--mode", "DISTRIBUTED", "--write-ppe09", "--stop-at", "4")
    written = (tmp_path / "snapshot_iter_4").read_bytes()
    run(tmp_path, 2, "--mode", "DISTRIBUTED", "--result", str(tmp_path / "result.pt"))
    result = _result(tmp_path / "result.pt")
    assert result["resumed_from"] == str(tmp_path / "snapshot_iter_4")
    assert_same_training(result, sharded_reference)
    # Ours writes the same kind of file, and leaves 0.9's as it was.
    assert (tmp_path / "snapshot_iter_4").read_bytes() == written
    for iteration in (6, 8, 10, 12):
        assert (tmp_path / f"snapshot_iter_{iteration}").is_file()
    state = torch.load(tmp_path / "snapshot_iter_12", weights_only=True)
    assert state["_start_iteration"] == 12


@pytest.mark.slow
def test_a_ppe09_sharded_snapshot_resumes_on_as_many_ranks_only(
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    run: Run,
) -> None:
    # A PPE 0.9 job in SnapshotMode.SHARDED left one file per rank and a 'complete' marker.
    run(tmp_path, 2, "--mode", "SHARDED", "--write-ppe09", "--stop-at", "4")
    assert sorted(os.listdir(tmp_path / "snapshot_iter_4")) == ["0", "1", "complete"]
    other = run(tmp_path, 0, "--mode", "SHARDED", expect_failure=True)
    assert "is a PPE 0.9 SHARDED snapshot directory, written by 2 ranks" in other.stderr
    assert "resumes only on 2 ranks, not 1" in other.stderr
    run(tmp_path, 2, "--mode", "SHARDED", "--result", str(tmp_path / "result.pt"))
    result = _result(tmp_path / "result.pt")
    assert result["resumed_from"] == str(tmp_path / "snapshot_iter_4")
    assert_same_training(result, sharded_reference)
    assert sorted(os.listdir(tmp_path / "snapshot_iter_4")) == ["0", "1", "complete"]
    assert (tmp_path / "snapshot_iter_12" / ".metadata").exists()  # ours: DCP
