"""Shared helpers of the ppe-training tests (as fixtures): free TCP ports, OpenMPI's mpirun,
``python -m torch.distributed.run``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A function returning a TCP port of 127.0.0.1 free when called (one per process group)."""
    return _free_port


@pytest.fixture
def mpirun() -> str:
    """The path of OpenMPI's ``mpirun``; the test is skipped without it or without mpi4py."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.skip(
            "needs OpenMPI's mpirun: run scripts/install_mpi.sh (apt-get install openmpi-bin "
            "libopenmpi-dev, as root)"
        )
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("needs mpi4py in this environment: run scripts/install_mpi.sh")
    return path


def _torchrun(
    nproc: int,
    script: str | Path,
    *args: str,
    launcher: Sequence[str] = ("--standalone",),
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``script`` under ``python -m torch.distributed.run`` with ``nproc`` local processes.

    ``launcher`` holds torchrun's own options besides ``--nproc-per-node``; the processes
    get one intra-op thread each and warnings off (``env`` adds to or overrides that).
    The result is returned unchecked, output captured.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launcher,
        "--nproc-per-node",
        str(nproc),
        str(script),
        *args,
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=environment, check=False
    )


@pytest.fixture(scope="session")
def torchrun() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``torchrun(nproc, script, *args, launcher=("--standalone",), env=None, timeout=240)``:
    the script on ``nproc`` local processes, its completed process returned unchecked."""
    return _torchrun
