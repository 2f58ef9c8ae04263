"""The process group as ppe's distributed features see it, and the reductions they share.

``distributed=True`` features (DistributedEvaluator, LogReport, observe_value, the accumulate
extensions) call these at the same iterations on every rank: each call is a collective. Without
an initialized default process group a process is a group of one (nothing is exchanged), unless
a launcher (torchrun, mpirun) says the job has several processes: then forgetting
``init_process_group`` is an error, not silently local results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.reporting import DictSummary

# Environment variables in which launchers give the number of processes of the job.
_LAUNCHER_WORLD_SIZES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")


def is_initialized() -> bool:
    """Whether the default process group of ``torch.distributed`` exists."""
    return dist.is_available() and dist.is_initialized()


def check_int(value: Any, name: str, owner: str, minimum: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``, else an error."""
    if not is_int(value):
        message = f"{owner}: {name} must be an integer, got {value!r}"
        raise TypeError(message)
    if value < minimum:
        message = f"{owner}: {name} must be at least {minimum}, got {value}"
        raise ValueError(message)
    return value


def world_size(owner: str) -> int:
    """The number of processes of the default group; 1 without one (see the module doc).

    Raises:
        RuntimeError: No process group, but a launcher started several processes.
    """
    if is_initialized():
        return dist.get_world_size()
    for variable in _LAUNCHER_WORLD_SIZES:
        text = os.environ.get(variable, "")
        if text.isdigit() and int(text) > 1:
            message = (
                f"{owner} reduces over all processes, and this one was started as one of "
                f"{text} ({variable}={text}), but torch.distributed is not initialized: call "
                "torch.distributed.init_process_group() (under torchrun) or "
                "pytorch_pfn_extras.distributed.initialize_ompi_environment() (under mpirun) "
                "before training"
            )
            raise RuntimeError(message)
    return 1


def replicas_and_rank(num_replicas: Any, rank: Any, owner: str) -> tuple[int, int]:
    """The given ``num_replicas`` and ``rank``, or those of the default group, checked.

    Raises:
        RuntimeError: One of them is ``None`` and torch.distributed is not initialized.
        ValueError: ``num_replicas < 1`` or ``rank`` outside ``[0, num_replicas)``.
    """
    if num_replicas is None or rank is None:
        if not is_initialized():
            message = (
                f"{owner}: num_replicas and rank default to the world size and rank of "
                "torch.distributed, which is not initialized; call init_process_group() "
                "first, or pass num_replicas= and rank="
            )
            raise RuntimeError(message)
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
    num_replicas = check_int(num_replicas, "num_replicas", owner, 1)
    rank = check_int(rank, "rank", owner, 0)
    if rank >= num_replicas:
        message = f"{owner}: rank {rank} is out of range for num_replicas={num_replicas}"
        raise ValueError(message)
    return num_replicas, rank


def all_gather(value: Any, owner: str) -> list[Any]:
    """``value`` of every rank, in rank order (a picklable object; tensors on the CPU)."""
    if world_size(owner) == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def reduce_summary(summary: DictSummary, owner: str) -> DictSummary:
    """A summary of what every rank added to its ``summary``: the sums, key by key.

    The means of the result are those over all the values (and weights) of all ranks; a key
    reported on some ranks only is averaged over those reports. Every rank gets the same
    result. In a group of one, ``summary`` itself is returned.
    """
    if world_size(owner) == 1:
        return summary
    merged: dict[str, dict[str, float]] = {}
    for state in all_gather(summary.state_dict(), owner):
        for key, totals in state.items():
            sums = merged.setdefault(key, {"_x": 0.0, "_x2": 0.0, "_n": 0.0})
            for name in ("_x", "_x2", "_n"):
                sums[name] += float(totals[name])
    result = DictSummary()
    result.load_state_dict(merged)
    return result


def mean_over_ranks(value: Any, owner: str) -> Any:
    """The mean of ``value`` (a number or a tensor of any shape) over all ranks.

    A tensor result has the device of the local value and its floating dtype; a number gives
    a float. In a group of one, ``value`` itself is returned.

    Raises:
        TypeError: ``value`` is neither a number nor a tensor.
    """
    if isinstance(value, torch.Tensor):
        local: Any = value.detach().cpu()
    else:
        try:
            local = float(value)
        except (TypeError, ValueError):
            message = (
                f"{owner} averages the value over the ranks: it must be a number or a tensor, "
                f"got {type(value).__name__}: {value!r}"
            )
            raise TypeError(message) from None
    if world_size(owner) == 1:
        return value
    values = all_gather(local, owner)
    if not any(isinstance(v, torch.Tensor) for v in values):
        return sum(values) / len(values)
    stacked = torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in values])
    mean = stacked.mean(dim=0)
    if isinstance(value, torch.Tensor):
        dtype = value.dtype if value.is_floating_point() else torch.get_default_dtype()
        return mean.to(device=value.device, dtype=dtype)
    return mean.to(torch.get_default_dtype())


def rank() -> int:
    """This process's rank in the default group; 0 without one."""
    return dist.get_rank() if is_initialized() else 0


def partial_state_is_mine(state: Mapping[str, Any]) -> bool:
    """Whether the partial interval in ``state`` was saved by this rank.

    The distributed extensions sum their partial interval over the ranks; a snapshot written
    by one rank (``saver_rank``) and loaded by all must count that rank's values once, so the
    other ranks restart their partial interval empty. A state without a rank (saved without
    ``distributed=True``) belongs to everyone.
    """
    saved = state.get("rank")
    return saved is None or int(saved) == rank()
