"""initialize_ompi_environment under OpenMPI's mpirun (the ``mpi`` tests).

The module is also the program that ``mpirun -n 2`` starts: each process initializes
torch.distributed from OpenMPI's variables, checks its rank against MPI's own (mpi4py), and
all-reduces a tensor through gloo. Without mpirun or mpi4py the tests skip, naming
``scripts/install_mpi.sh``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from pytorch_pfn_extras.distributed import (
    DistributedValidationSampler,
    initialize_ompi_environment,
)


def _program(init_method: str) -> None:
    from mpi4py import MPI

    world_size, rank, local_rank = initialize_ompi_environment(init_method=init_method, timeout=60)
    comm = MPI.COMM_WORLD
    assert (
        (world_size, rank)
        == (comm.Get_size(), comm.Get_rank())
        == (
            dist.get_world_size(),
            dist.get_rank(),
        )
    )
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    share = list(DistributedValidationSampler(range(5), shuffle=False))  # from the group
    everything = sorted(i for part in comm.allgather(share) for i in part)
    print(f"RESULT {world_size} {rank} {local_rank} {total.item()} {everything}", flush=True)
    dist.destroy_process_group()


@pytest.mark.mpi
def test_mpirun_processes_form_a_torch_distributed_group(
    mpirun: str, free_port: Callable[[], int]
) -> None:
    # The "env" init method is checked without MPI, by test_distributed_sampler.py.
    init_method = "tcp"
    result = subprocess.run(
        [
            mpirun,
            "-n", "2", "--allow-run-as-root", "--oversubscribe",
            "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={free_port()}",
            "-x", "PYTHONWARNINGS",
            sys.executable, __file__, init_method,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"},
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(2):
        # local rank = rank on one machine; 1 + 2 = 3; the shares cover 0..4 once
        assert f"RESULT 2 {rank} {rank} 3.0 [0, 1, 2, 3, 4]" in result.stdout


if __name__ == "__main__":
    _program(sys.argv[1])
