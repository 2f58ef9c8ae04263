"""Shared helpers of the ppe-training tests (as fixtures): free TCP ports, OpenMPI's mpirun."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable

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
