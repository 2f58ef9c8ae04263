"""An exception on one rank ends every rank, with that error, within the group's timeout.

The module is also the worker: each rank trains a DistributedDataParallel model through the
extensions manager with a process group whose timeout is ``TIMEOUT`` seconds, and rank 1 raises
in its third iteration while rank 0 waits for it in the gradient all-reduce. Under torchrun the
agent ends the job and reports rank 1's error; started as bare processes (as mpirun starts
them), rank 0's collective fails as soon as rank 1's process is gone (the peer closed its
connections) and, when rank 1 stays alive without taking part any more, once the group's
timeout has expired: never a silent hang.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
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
# A failing job must end well within this (start-up included; the machine may be busy).
DEADLINE = 90
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
                        time.sleep(DEADLINE)
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
    start = time.monotonic()
    result = torchrun(2, __file__, str(tmp_path), "env://", timeout=DEADLINE)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"ValueError: {ERROR}" in output
    assert "finished" not in output  # neither rank went on training
    assert time.monotonic() - start < DEADLINE


def _bare_processes(
    tmp_path: Path, port: int, hang: bool
) -> tuple[list[subprocess.Popen[str]], float]:
    init_method = f"tcp://127.0.0.1:{port}"
    start = time.monotonic()
    extra = ["hang"] if hang else []
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, str(tmp_path), init_method, str(rank), "2", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        for rank in range(2)
    ]
    return processes, start


def test_bare_processes_all_end_when_one_rank_fails(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    processes, start = _bare_processes(tmp_path, free_port(), hang=False)
    outputs: list[str] = []
    try:
        for process in processes:
            remaining = max(1.0, DEADLINE - (time.monotonic() - start))
            outputs.append(process.communicate(timeout=remaining)[0])
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank still runs {DEADLINE} s after the failure: a hang")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
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
    processes, start = _bare_processes(tmp_path, free_port(), hang=True)
    try:
        survivor = processes[0].communicate(timeout=DEADLINE)[0]
        elapsed = time.monotonic() - start
    except subprocess.TimeoutExpired:
        pytest.fail(f"rank 0 still waits {DEADLINE} s after its peer stopped taking part")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()
    assert processes[0].returncode != 0, survivor
    assert "finished" not in survivor
    assert "timed out" in survivor.lower() or "timeout" in survivor.lower(), survivor
    assert elapsed >= TIMEOUT  # it did wait for the peer, for the group's timeout


if __name__ == "__main__":
    if sys.argv[2] == "env://":  # under torchrun
        worker(sys.argv[1], "env://", None, None)
    else:
        worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "hang" in sys.argv)
