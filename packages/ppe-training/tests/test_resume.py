"""Exact resume: a run killed with SIGKILL and restarted with autoload ends like an uninterrupted one."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.training.triggers import EarlyStoppingTrigger

_SCRIPT = Path(__file__).with_name("training_resume_run.py")
_spec = importlib.util.spec_from_file_location("training_resume_run", _SCRIPT)
assert _spec is not None and _spec.loader is not None
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)

TOTAL_ITERATIONS = 20  # early stopping after epoch 5, 4 iterations per epoch


def _start(out_dir: Path, kill_at: int | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, str(_SCRIPT), str(out_dir)]
    if kill_at is not None:
        args.append(str(kill_at))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, int | None]:
    stdout, stderr = process.communicate(timeout=300)
    iterations = None
    for line in stdout.splitlines():
        if line.startswith("ITERATIONS "):
            iterations = int(line.split()[1])
    if process.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"training process failed ({process.returncode}):\n{stderr}")
    return process.returncode, iterations


def _without_times(state: Any) -> Any:
    """The state with wall-clock values removed (they legitimately differ)."""
    if isinstance(state, dict):
        return {k: _without_times(v) for k, v in state.items() if k != "elapsed_time"}
    if isinstance(state, list):
        return [_without_times(v) for v in state]
    return state


def _assert_same_state(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (path, a.keys(), b.keys())
        for key in a:
            _assert_same_state(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


def _final_state(out_dir: Path) -> Any:
    return _without_times(torch.load(out_dir / "final.pt", weights_only=True))


def _jsonl(out_dir: Path) -> list[dict[str, Any]]:
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return _without_times([json.loads(line) for line in lines])


@pytest.mark.slow
def test_sigkilled_run_resumes_exactly_and_a_finished_run_does_nothing(tmp_path: Path) -> None:
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight = _start(straight_dir)
    # Killed mid-epoch right after a snapshot (6), and after a log entry written past the last
    # snapshot (15: snapshot 14, log.jsonl entry 15, which the resumed run must drop).
    for kill_at, kept in ((6, [4, 6]), (15, [12, 14])):
        assert _finish(_start(resumed_dir, kill_at)) == (-signal.SIGKILL, None)
        snapshots = sorted(p.name for p in resumed_dir.iterdir() if p.name.startswith("snapshot"))
        assert snapshots == sorted(f"snapshot_iter_{i}" for i in kept)
    assert _finish(_start(resumed_dir)) == (0, TOTAL_ITERATIONS - 14)
    assert _finish(straight) == (0, TOTAL_ITERATIONS)

    expected = _final_state(straight_dir)
    assert expected["_start_iteration"] == TOTAL_ITERATIONS
    assert expected["stop_trigger"]["state"]["count"] == 2
    _assert_same_state(_final_state(resumed_dir), expected)
    assert _without_times(json.loads((resumed_dir / "log").read_text())) == _without_times(
        json.loads((straight_dir / "log").read_text())
    )
    assert _jsonl(resumed_dir) == _jsonl(straight_dir)

    # Resuming the finished run: zero iterations, same final state.
    os.remove(resumed_dir / "final.pt")
    assert _finish(_start(resumed_dir)) == (0, 0)
    _assert_same_state(_final_state(resumed_dir), expected)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]]]:
    out_dir = tmp_path_factory.mktemp("uninterrupted")
    assert job.train(str(out_dir)) == TOTAL_ITERATIONS
    return _final_state(out_dir), _jsonl(out_dir)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stops=st.lists(st.integers(0, TOTAL_ITERATIONS), min_size=1, max_size=3))
def test_resume_from_any_iterations_matches_the_uninterrupted_run(
    tmp_path_factory: pytest.TempPathFactory,
    uninterrupted: tuple[Any, list[dict[str, Any]]],
    stops: list[int],
) -> None:
    out_dir = tmp_path_factory.mktemp("resumed")
    for stop in sorted(stops):
        job.train(str(out_dir), abandon_at=stop)
    job.train(str(out_dir))
    expected_state, expected_jsonl = uninterrupted
    _assert_same_state(_final_state(out_dir), expected_state)
    assert _jsonl(out_dir) == expected_jsonl


@pytest.mark.parametrize("resume_at", [3, 5, 9])
def test_early_stopping_stop_trigger_resumes_exactly_through_a_snapshot(
    tmp_path: Path, resume_at: int
) -> None:
    """The stop trigger sees iteration k's observation once, before the snapshot of k."""

    def run(out_dir: Path, abandon_at: int | None) -> ExtensionsManager:
        stop = EarlyStoppingTrigger(check_trigger=(2, "iteration"), monitor="v", patience=2)
        manager = ExtensionsManager(
            {}, {}, 1, iters_per_epoch=3, out_dir=out_dir, stop_trigger=stop
        )
        manager.extend(ext_module.snapshot(autoload=True), trigger=(1, "iteration"))
        while not manager.stop_trigger and manager.iteration != abandon_at:
            with manager.run_iteration():
                reporting.report({"v": [5, 4, 3, 3, 4, 2, 6, 6, 7, 8, 9, 9][manager.iteration]})
        return manager

    straight = run(tmp_path / "a", None)
    run(tmp_path / "b", resume_at)
    resumed = run(tmp_path / "b", None)
    # Pair means 4.5, 3, 3, 6: no improvement at iterations 6 and 8 -> stop at 8.
    assert resumed.iteration == straight.iteration == 8
    assert resumed.state_dict()["stop_trigger"] == straight.state_dict()["stop_trigger"]
