"""The Slurm cluster of the tests (the ``slurm_cluster`` fixture, ``_slurm.py``).

Jobs run to their real end state, and a job warned by ``sbatch --signal=B:USR1`` requeues
itself with ``scontrol requeue`` and runs again: the path that preemptible training takes.
Without Slurm (``scripts/install_slurm.sh``) the cluster's tests skip.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

# registered by conftest.py, which loads _slurm.py (this directory is not on sys.path)
from ppe_training_tests_slurm import (  # type: ignore[import-not-found]
    SlurmCluster,
    finished,
    slurm_unavailable,
    warning_options,
)

# The batch job's program: its first run waits for USR1, then requeues its job and exits 0;
# the requeued run exits at once. Each run leaves a JSON marker in the folder argv[1].
_PREEMPTIBLE = """\
import json, os, signal, subprocess, sys, time
from pathlib import Path

out = Path(sys.argv[1])
restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def mark(name, **fields):
    fields.update(time=time.time(), restarts=restarts, job=os.environ["SLURM_JOB_ID"])
    (out / name).write_text(json.dumps(fields))


if restarts == 0:
    received = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(time.time()))
    mark("first_run.json")
    while not received:
        time.sleep(0.1)
    mark("usr1.json", received=received[0])
    subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=True)
    mark("requeued.json")
    sys.exit(0)
mark("second_run.json")
"""


def _marker(folder: Path, name: str) -> dict[str, float | int | str]:
    return json.loads((folder / name).read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.parametrize(("status", "state"), [(0, "COMPLETED"), (3, "FAILED")])
def test_batch_job_ends_in_the_state_of_its_exit_status(
    slurm_cluster: SlurmCluster, tmp_path: Path, status: int, state: str
) -> None:
    script = f'#!/bin/sh\necho "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"\nexit {status}\n'
    job_id = slurm_cluster.sbatch(script, cwd=tmp_path)

    info = slurm_cluster.wait(job_id, timeout=60)

    context = slurm_cluster.describe(job_id)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == (state, f"{status}:0", "0")
    assert slurm_cluster.output(job_id) == tmp_path / f"slurm-{job_id}.out", context
    assert slurm_cluster.output(job_id).read_text() == f"job {job_id} on {slurm_cluster.node}\n"


@pytest.mark.slow
@pytest.mark.slurm
def test_job_warned_by_signal_requeues_itself_and_completes_on_its_second_run(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    program = tmp_path / "preemptible.py"
    program.write_text(_PREEMPTIBLE)
    # exec: the python process is the batch shell, which the B: signal goes to
    script = (
        "#!/bin/bash\n"
        f"exec {shlex.quote(sys.executable)} -u {shlex.quote(str(program))} "
        f"{shlex.quote(str(tmp_path))}\n"
    )
    submitted = time.time()
    # USR1 at the controller's first time-limit check (every 30 s) 3 s or more after the start;
    # the requeued run may start 6 s after the requeue (cred_expire + 1)
    job_id = slurm_cluster.sbatch(script, "--requeue", *warning_options(3), cwd=tmp_path)

    info = slurm_cluster.wait(job_id, lambda i: finished(i) and i["Restarts"] != "0")
    ended = time.time()

    context = slurm_cluster.describe(job_id)
    assert info["JobState"] == "COMPLETED", context
    assert info["Restarts"] == "1", context
    assert info["ExitCode"] == "0:0", context
    assert info["BatchFlag"] == "1", context
    first, usr1 = _marker(tmp_path, "first_run.json"), _marker(tmp_path, "usr1.json")
    requeued, second = _marker(tmp_path, "requeued.json"), _marker(tmp_path, "second_run.json")
    assert first["job"] == usr1["job"] == second["job"] == str(job_id)
    assert (first["restarts"], usr1["restarts"], second["restarts"]) == (0, 0, 1)
    # USR1 came to the running first run, which requeued; the second run started after that
    assert submitted < float(first["time"]) < float(usr1["received"]) < float(requeued["time"])
    assert float(requeued["time"]) < float(second["time"]) < ended
    print(
        f"submit -> first run {float(first['time']) - submitted:.1f} s, "
        f"first run -> USR1 {float(usr1['received']) - float(first['time']):.1f} s, "
        f"requeue -> second run {float(second['time']) - float(requeued['time']):.1f} s, "
        f"submit -> COMPLETED seen {ended - submitted:.1f} s"
    )


def test_missing_slurm_commands_are_named_with_the_install_script(tmp_path: Path) -> None:
    reason = slurm_unavailable(path=str(tmp_path))

    assert reason is not None
    for command in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol"):
        assert command in reason
    assert "scripts/install_slurm.sh" in reason
