"""ppe.distributed's samplers and initialize_ompi_environment, without MPI.

The samplers take ``num_replicas`` and ``rank`` explicitly (every rank's share is computed here);
``initialize_ompi_environment`` runs in two processes given the variables mpirun would set.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from pytorch_pfn_extras.distributed import (
    DistributedValidationSampler,
    create_distributed_subset_indices,
    initialize_ompi_environment,
)

OMPI = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (*OMPI, "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize("size", [7, 8, 11, 100])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [True, False])
def test_validation_shares_hold_every_sample_exactly_once(
    size: int, replicas: int, shuffle: bool
) -> None:
    shares = [
        list(DistributedValidationSampler(range(size), replicas, rank, shuffle=shuffle))
        for rank in range(replicas)
    ]
    assert sorted(i for share in shares for i in share) == list(range(size))
    lengths = [len(DistributedValidationSampler(range(size), replicas, r)) for r in range(replicas)]
    assert lengths == [len(share) for share in shares]
    assert max(lengths) - min(lengths) <= 1


def test_validation_sampler_order_depends_on_seed_and_epoch_only() -> None:
    def share(seed: int, epoch: int = 0) -> list[int]:
        sampler = DistributedValidationSampler(range(20), 2, 1, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert share(3) == share(3)
    assert share(3) != share(4)
    assert share(3, epoch=1) != share(3)
    assert list(DistributedValidationSampler(range(6), 2, 1, shuffle=False)) == [3, 4, 5]


def test_validation_sampler_feeds_a_data_loader() -> None:
    data = torch.arange(10.0)
    sampler = DistributedValidationSampler(data, 3, 2, shuffle=False)
    batches = list(torch.utils.data.DataLoader(data, batch_size=2, sampler=sampler))
    assert torch.cat(batches).tolist() == [7.0, 8.0, 9.0]


@pytest.mark.parametrize("size", [5, 8, 13])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_training_subsets_are_equal_sized_and_cover_the_dataset(size: int, replicas: int) -> None:
    shares = [
        create_distributed_subset_indices(size, replicas, rank, seed=5) for rank in range(replicas)
    ]
    share = -(-size // replicas)
    assert [len(s) for s in shares] == [share] * replicas
    counts = Counter(i for s in shares for i in s)
    assert set(counts) == set(range(size))
    assert sum(counts.values()) - size == share * replicas - size < replicas  # the padding


def test_training_subsets_without_shuffle_are_consecutive() -> None:
    assert create_distributed_subset_indices(5, 2, 0, shuffle=False) == [0, 1, 2]
    assert create_distributed_subset_indices(5, 2, 1, shuffle=False) == [2, 3, 4]
    assert create_distributed_subset_indices(6, 2, 1, seed=1) == create_distributed_subset_indices(
        6, 2, 1, seed=1
    )


def test_a_single_process_draws_its_own_seed() -> None:
    assert sorted(create_distributed_subset_indices(9, 1, 0)) == list(range(9))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: DistributedValidationSampler(range(3), 4, 0),
            ValueError,
            "the dataset has 3 samples, fewer than the 4 replicas",
        ),
        (
            lambda: create_distributed_subset_indices(1, 2, 0, seed=0),
            ValueError,
            "the dataset has 1 samples, fewer than the 2 replicas",
        ),
        (
            lambda: DistributedValidationSampler(range(8), 2, 2),
            ValueError,
            "rank 2 is out of range for num_replicas=2",
        ),
        (
            lambda: create_distributed_subset_indices(8, 2, -1, seed=0),
            ValueError,
            "rank must be at least 0, got -1",
        ),
        (
            lambda: DistributedValidationSampler(range(8), 0, 0),
            ValueError,
            "num_replicas must be at least 1, got 0",
        ),
        (
            lambda: DistributedValidationSampler(range(8), 2, True),
            TypeError,
            "rank must be an integer, got True",
        ),
        (
            lambda: DistributedValidationSampler(iter(range(3)), 1, 0),
            TypeError,
            "needs a dataset with len\\(\\), got range_iterator",
        ),
        (
            lambda: DistributedValidationSampler(range(8)),
            RuntimeError,
            "torch.distributed, which is not initialized; call init_process_group",
        ),
        (
            lambda: create_distributed_subset_indices(8, 2, 0),
            RuntimeError,
            "pass the same seed= on every rank",
        ),
    ],
)
def test_bad_arguments_are_clear_errors(call: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]


def test_a_world_of_one_initializes_nothing() -> None:
    assert initialize_ompi_environment() == (1, 0, 0)
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("variables", "kwargs", "error", "match"),
    [
        ({}, {"backend": "mpi"}, ValueError, "backend must be 'gloo' or 'nccl', got 'mpi'"),
        ({}, {"init_method": "file"}, ValueError, "init_method must be 'tcp' or 'env'"),
        (
            {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "2"},
            {},
            ValueError,
            r"rank 2 \(OMPI_COMM_WORLD_RANK=2\) is out of range for world size 2 "
            r"\(OMPI_COMM_WORLD_SIZE=2\)",
        ),
        ({}, {"world_size": 2, "rank": 5}, ValueError, r"rank 5 \(rank=\) is out of range"),
        ({}, {"world_size": 0}, ValueError, "world_size must be at least 1, got 0"),
        (
            {"OMPI_COMM_WORLD_SIZE": "two"},
            {},
            ValueError,
            "OMPI_COMM_WORLD_SIZE='two' is not an integer",
        ),
        ({"MASTER_PORT": "99999"}, {}, ValueError, "port must be a TCP port number"),
        ({}, {"timeout": 0}, ValueError, "timeout must be a positive number of seconds, got 0"),
    ],
)
def test_bad_environments_and_arguments_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    kwargs: dict[str, object],
    error: type,
    match: str,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(error, match=match):
        initialize_ompi_environment(**kwargs)  # type: ignore[arg-type]


def _rank_main() -> None:
    """One of two processes given the variables of ``mpirun -n 2``: prints what it got."""
    world_size, rank, local_rank = initialize_ompi_environment(init_method=sys.argv[1], timeout=60)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    print(f"RESULT {world_size} {rank} {local_rank} {total.item()}", flush=True)
    assert dist.get_backend() == "gloo"
    dist.destroy_process_group()


@pytest.mark.parametrize("init_method", ["tcp", "env"])
def test_two_processes_with_the_variables_of_mpirun_form_a_group(
    init_method: str, free_port: Callable[[], int]
) -> None:
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, init_method],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "PYTHONWARNINGS": "ignore",
            },
        )
        for rank in range(2)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, output
        assert f"RESULT 2 {rank} {rank} 3.0" in output


def test_an_existing_group_of_another_shape_is_an_error(
    monkeypatch: pytest.MonkeyPatch, free_port: Callable[[], int]
) -> None:
    # No group exists yet: conftest.py fails a test that leaves one.
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        assert initialize_ompi_environment() == (1, 0, 0)  # the same shape: accepted
        monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
        with pytest.raises(RuntimeError, match="already initialized with world size 1 and rank 0"):
            initialize_ompi_environment()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main()
