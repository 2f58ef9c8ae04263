"""initialize_ompi_environment: torch.distributed from the variables that mpirun sets."""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras.distributed._collective import check_int, is_initialized

_OWNER = "initialize_ompi_environment"
_BACKENDS = ("gloo", "nccl")
_INIT_METHODS = ("tcp", "env")


def _from_environment(variable: str, default: int, name: str, minimum: int) -> int:
    text = os.environ.get(variable)
    if text is None:
        return check_int(default, name, _OWNER, minimum)
    try:
        value = int(text)
    except ValueError:
        message = f"{_OWNER}: {variable}={text!r} is not an integer"
        raise ValueError(message) from None
    if value < minimum:
        message = f"{_OWNER}: {variable}={value} must be at least {minimum}"
        raise ValueError(message)
    return value


def _source(variable: str, name: str) -> str:
    return f"{variable}={os.environ[variable]}" if variable in os.environ else f"{name}="


def _port(port: Any) -> str:
    text = str(port)
    if isinstance(port, bool) or not text.isdigit() or not 0 < int(text) < 65536:
        message = f"{_OWNER}: port must be a TCP port number (1-65535), got {port!r}"
        raise ValueError(message)
    return text


def initialize_ompi_environment(
    *,
    backend: str = "gloo",
    init_method: str = "tcp",
    world_size: int = 1,
    rank: int = 0,
    local_rank: int = 0,
    addr: str = "localhost",
    port: str = "1234",
    timeout: int = 1800,
) -> tuple[int, int, int]:
    """Initialize torch.distributed environments with values taken from OpenMPI.

    Under ``mpirun``, each process finds its world size, rank and local rank in
    ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK`` and ``OMPI_COMM_WORLD_LOCAL_RANK``; the
    arguments are used where a variable is missing (a plain ``python`` run is a world of one).
    The address and port of rank 0's store come from ``MASTER_ADDR`` and ``MASTER_PORT``
    when set (``mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500 ...``), else from ``addr``
    and ``port``. With more than one process, the default process group is initialized
    (unless it already is); a world of one initializes nothing, and ppe's distributed features
    treat it as a group of one. With ``backend='nccl'`` the CUDA device ``local_rank`` is made
    current.

    Args:
        backend: ``'gloo'`` or ``'nccl'``.
        init_method: ``'tcp'`` (``tcp://addr:port``) or ``'env'`` (the variables
            ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` are set, then
            ``env://``).
        world_size: The world size without ``OMPI_COMM_WORLD_SIZE``.
        rank: The rank without ``OMPI_COMM_WORLD_RANK``.
        local_rank: The local rank without ``OMPI_COMM_WORLD_LOCAL_RANK``.
        addr: The address of the master process (rank 0) without ``MASTER_ADDR``.
        port: Its port without ``MASTER_PORT``.
        timeout: Seconds a collective waits for the other ranks before failing (also the
            time to wait for every rank to join).

    Returns:
        ``(world_size, rank, local_rank)``.

    Raises:
        ValueError: An unknown backend or init method, a variable that is not an integer, a
            rank or local rank out of range for the world size, a bad port or timeout.
        RuntimeError: The process group is already initialized with another world size or
            rank, or ``backend='nccl'`` without CUDA.

    Example:
        >>> # mpirun -n 2 python train.py
        >>> world_size, rank, local_rank = initialize_ompi_environment(port="29500")
    """
    if backend not in _BACKENDS:
        message = f"{_OWNER}: backend must be 'gloo' or 'nccl', got {backend!r}"
        raise ValueError(message)
    if init_method not in _INIT_METHODS:
        message = f"{_OWNER}: init_method must be 'tcp' or 'env', got {init_method!r}"
        raise ValueError(message)
    size = _from_environment("OMPI_COMM_WORLD_SIZE", world_size, "world_size", 1)
    this = _from_environment("OMPI_COMM_WORLD_RANK", rank, "rank", 0)
    local = _from_environment("OMPI_COMM_WORLD_LOCAL_RANK", local_rank, "local_rank", 0)
    for value, variable, name in (
        (this, "OMPI_COMM_WORLD_RANK", "rank"),
        (local, "OMPI_COMM_WORLD_LOCAL_RANK", "local_rank"),
    ):
        if value >= size:
            message = (
                f"{_OWNER}: {name} {value} ({_source(variable, name)}) is out of range for "
                f"world size {size} ({_source('OMPI_COMM_WORLD_SIZE', 'world_size')})"
            )
            raise ValueError(message)
    address = os.environ.get("MASTER_ADDR", addr)
    port_text = _port(os.environ.get("MASTER_PORT", port))
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        message = f"{_OWNER}: timeout must be a positive number of seconds, got {timeout!r}"
        raise ValueError(message)

    if backend == "nccl":
        if not torch.cuda.is_available():
            message = f"{_OWNER}: backend='nccl' needs CUDA, which is not available here"
            raise RuntimeError(message)
        torch.cuda.set_device(local)
    if is_initialized():
        actual = (dist.get_world_size(), dist.get_rank())
        if actual != (size, this):
            message = (
                f"{_OWNER}: torch.distributed is already initialized with world size "
                f"{actual[0]} and rank {actual[1]}, not {size} and {this}"
            )
            raise RuntimeError(message)
    elif size > 1:
        if init_method == "tcp":
            host = f"[{address}]" if ":" in address else address
            url = f"tcp://{host}:{port_text}"
        else:
            os.environ.update(
                MASTER_ADDR=address, MASTER_PORT=port_text, WORLD_SIZE=str(size), RANK=str(this)
            )
            url = "env://"
        dist.init_process_group(
            backend,
            init_method=url,
            world_size=size,
            rank=this,
            timeout=datetime.timedelta(seconds=timeout),
        )
    return size, this, local
