"""PreemptionHandler(requeue=True) under a real single-node Slurm (the ``slurm_cluster``
fixture): ``sbatch --requeue --signal=B:USR1@<s>`` of sharded_train.py, whose first run is
told to stop by Slurm's USR1, saves, requeues its own job with ``scontrol requeue`` and
exits; the requeued run autoloads and ends with the uninterrupted run's weights. Without
Slurm (``scripts/install_slurm.sh``) it skips."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

# registered by conftest.py, which loads _slurm.py (this directory is not on sys.path)
from ppe_training_tests_slurm import (  # type: ignore[import-not-found]
    SlurmCluster,
    finished,
    warning_options,
)

SCRIPT = Path(__file__).with_name("sharded_train.py")


@pytest.mark.slow
@pytest.mark.slurm
def test_a_job_warned_by_slurm_saves_requeues_itself_and_its_second_run_resumes_exactly(
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
) -> None:
    out, result = tmp_path / "out", tmp_path / "result.pt"
    train = [sys.executable, str(SCRIPT), str(out), "--mode", "DEFAULT"]
    # The first run takes 4 s an iteration, so that USR1 (10 to 40 s after the job starts, as
    # Slurm checks time limits every 30 s) comes in the middle of its 12 iterations. USR1 goes
    # to the batch shell (B:), which hands it to python only once python has logged its first
    # iteration (LogReport's `log`: the handler is installed by then), however long python
    # takes to start on a busy machine; an early USR1 would kill it. The requeued run gets the
    # same warning: it ignores USR1 (without the handler, which would take it) and does not
    # sleep. `exec`: the batch shell is python.
    script = f"""#!/bin/bash
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  ready={shlex.quote(str(out / "log"))}
  trap 'until [ -e "$ready" ] || ! kill -0 $child 2>/dev/null; do sleep 0.1; done; kill -USR1 $child' USR1
  {shlex.join(train)} --result {shlex.quote(str(result))} --preempt --requeue --sleep 4 &
  child=$!
  wait $child  # returns early to run the trap
  while kill -0 $child 2>/dev/null; do wait $child; done
  wait $child  # python's exit status
else
  trap '' USR1
  exec {shlex.join(train)} --result {shlex.quote(str(result))}
fi
"""
    options = warning_options(10, minutes=2)
    job_id = slurm_cluster.sbatch(script, "--requeue", *options, cwd=tmp_path)
    info = slurm_cluster.wait(job_id, lambda i: finished(i) and i["Restarts"] != "0", timeout=240)
    context = slurm_cluster.describe(job_id)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", context
    output = slurm_cluster.output(job_id).read_text()
    # Slurm ends the first run once it requeued itself (SIGTERM): what the script prints after
    # the loop may not come, so the stop is read from the handler's own messages.
    first = re.search(
        r"SIGUSR1 was received by this process; training stops at iteration (\d+)", output
    )
    assert first is not None, context
    stop = int(first.group(1))
    assert 1 <= stop < 12, context
    assert f"requeueing the job with ['scontrol', 'requeue', '{job_id}']" in output, context
    assert "RANK 0 DONE 12 PREEMPTED False" in output, context
    resumed = torch.load(result, weights_only=True)
    assert resumed["resumed_from"].endswith(f"snapshot_iter_{stop}")
    assert_same_training(resumed, sharded_reference)
