"""An exception on one rank ends every rank, with that error, within the group's timeout.

The module is also the worker: each rank trains a DistributedDataParallel model through the
extensions manager with a process group whose timeout is ``TIMEOUT`` seconds, and rank 1 raises
in its third iteration while rank 0 waits for it in the gradient all-reduce. Under torchrun the
agent ends the job and reports rank 1's error; started as bare processes (as mpirun starts
them), rank 0's collective fails as soon as rank 1's process is gone (the peer closed its
connections) and, when rank 1 stays alive without taking part any more (it blocks reading its
stdin until the test closes it), once the group's timeout has expired: never a silent hang.
The tests measure no time: ``HANG`` only bounds how long a hang would block the run.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import pytorch_pfn_extras.training  # noqa: F401 -- the subpackage, without the meta-package
from pytorch_pfn_extras.nn.parallel import DistributedDataParallel
from pytorch_pfn_extras.training import ExtensionsManager, extensions

TIMEOUT = 5  # seconds: the process group's timeout in the workers
FAILING_RANK, FAILING_ITERATION = 1, 3
# A run still going after this many seconds is taken for a hang (far more than a busy machine
# needs; not a measure of the tests).
HANG = 90
ERROR = f"rank {FAILING_RANK} failed in iteration {FAILING_ITERATION}"


def worker(
    out_dir: str, init_method: str, rank: int | None, world_size: int | None, hang: bool = False
) -> None:
    torch.set_num_threads(1)
    if rank is None:  # under torchrun: everything from the environment
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT))
    else:
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=TIMEOUT),
        )
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(
        model, optimizer, 1, iters_per_epoch=10, out_dir=f"{out_dir}/rank{rank}"
    )
    manager.extend(extensions.LogReport(distributed=True, trigger=(2, "iteration")), name="log")
    try:
        while not manager.stop_trigger:
            with manager.run_iteration():
                if rank == FAILING_RANK and manager.iteration + 1 == FAILING_ITERATION:
                    if hang:  # the failed rank stays alive without taking part any more
                        print(f"ValueError: {ERROR}; hanging", flush=True)
                        sys.stdin.read()  # until the test closes it (or ends)
                    raise ValueError(ERROR)
                optimizer.zero_grad()
                F.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, 2)).backward()
                optimizer.step()
        print(f"rank {rank} finished", flush=True)
    finally:
        dist.destroy_process_group()


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def test_under_torchrun_a_failing_rank_ends_the_job_with_its_error(
    tmp_path: Path, torchrun: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    result = torchrun(2, __file__, str(tmp_path), "env://", timeout=HANG)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"ValueError: {ERROR}" in output
    assert "finished" not in output  # neither rank went on training


def _bare_processes(tmp_path: Path, port: int, hang: bool) -> list[subprocess.Popen[str]]:
    init_method = f"tcp://127.0.0.1:{port}"
    extra = ["hang"] if hang else []
    return [
        subprocess.Popen(
            [sys.executable, __file__, str(tmp_path), init_method, str(rank), "2", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        for rank in range(2)
    ]


def test_bare_processes_all_end_when_one_rank_fails(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    processes = _bare_processes(tmp_path, free_port(), hang=False)
    outputs: list[str] = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=HANG)[0])
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank still runs {HANG} s after the failure: a hang")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()  # closes its pipes (left open, a later test warns)
    survivor, failed = outputs
    assert processes[FAILING_RANK].returncode != 0
    assert f"ValueError: {ERROR}" in failed
    # The other rank waited for rank 1 in the gradient all-reduce: it fails there, with an
    # error from the collective, instead of hanging.
    assert processes[0].returncode != 0, survivor
    assert "finished" not in survivor
    assert "Error" in survivor


@pytest.mark.slow
def test_a_rank_waiting_for_a_hung_peer_fails_after_the_group_timeout(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    processes = _bare_processes(tmp_path, free_port(), hang=True)
    hung = processes[FAILING_RANK]
    try:
        survivor = processes[0].communicate(timeout=HANG)[0]
        # Rank 0 has failed while its peer was still alive (the peer waits for its stdin,
        # which only the test closes): not because the peer's connections closed.
        peer_alive = hung.poll() is None
        hung_output = hung.communicate(timeout=HANG)[0]  # closes its stdin: it may end now
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank still waits {HANG} s after its peer stopped taking part: a hang")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert peer_alive, hung_output
    assert f"ValueError: {ERROR}; hanging" in hung_output
    assert processes[0].returncode != 0, survivor
    assert "finished" not in survivor
    # The all-reduce gave up after the group's timeout (gloo names it: "Timed out waiting
    # 5000ms for recv operation to complete"), with an error instead of waiting forever.
    assert f"timed out waiting {TIMEOUT * 1000}ms" in survivor.lower(), survivor


if __name__ == "__main__":
    if sys.argv[2] == "env://":  # under torchrun
        worker(sys.argv[1], "env://", None, None)
    else:
        worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "hang" in sys.argv)
