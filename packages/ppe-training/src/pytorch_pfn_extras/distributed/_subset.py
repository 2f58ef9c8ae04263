"""create_distributed_subset_indices: equal-sized shares of a dataset for training."""

from __future__ import annotations

import random

import torch
import torch.distributed as dist

from pytorch_pfn_extras.distributed._collective import (
    check_int,
    is_initialized,
    replicas_and_rank,
)
from pytorch_pfn_extras.distributed._sampler import check_enough_samples

_OWNER = "create_distributed_subset_indices"


def _shared_seed(num_replicas: int) -> int:
    """A random seed, the same on every rank (drawn by rank 0 and broadcast)."""
    seed = [random.randrange(2**63)]
    if num_replicas > 1:
        if not is_initialized():
            message = (
                f"{_OWNER}: with shuffle=True and seed=None the ranks agree on a random seed "
                "through torch.distributed, which is not initialized; pass the same seed= on "
                "every rank"
            )
            raise RuntimeError(message)
        dist.broadcast_object_list(seed, src=0)
    return int(seed[0])


def create_distributed_subset_indices(
    num_total_samples: int,
    num_replicas: int | None = None,
    rank: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
) -> list[int]:
    """Return the indices of the dataset samples this rank trains on.

    Every rank gets ``ceil(n / num_replicas)`` consecutive indices of the order
    ``0 .. n - 1`` (``n = num_total_samples``; shuffled with a permutation drawn from
    ``seed`` when ``shuffle``), starting at position ``n * rank // num_replicas``, as in
    PPE: ``order[n * rank // R : n * rank // R + ceil(n / R)]``. So every rank has the same
    number of samples and runs the same number of iterations; the shares cover the
    dataset, and where ``n`` is not a multiple of ``num_replicas`` neighbouring shares
    overlap (at most ``num_replicas - 1`` samples appear twice; the last share ends at the
    last index, nothing wraps around). Use the result with
    :class:`torch.utils.data.Subset`; for evaluation, where each sample must count once,
    use :class:`DistributedValidationSampler`.

    Args:
        num_total_samples: The size of the dataset.
        num_replicas: Number of ranks; the world size of ``torch.distributed`` by default.
        rank: This process's rank; that of ``torch.distributed`` by default.
        shuffle: Shuffle the indices before cutting them.
        seed: Seed of the permutation, the same on every rank. ``None`` draws a random one on
            rank 0 and broadcasts it (a collective: every rank must call this function).

    Returns:
        This rank's indices, in the shuffled order.

    Raises:
        TypeError: An argument is not an integer.
        ValueError: ``rank`` is outside ``[0, num_replicas)``, or there are fewer samples
            than ranks.
        RuntimeError: ``num_replicas`` or ``rank`` is ``None``, or ``seed`` is ``None`` with
            several replicas, without torch.distributed.

    Example:
        >>> indices = create_distributed_subset_indices(len(train_set), seed=0)
        >>> loader = DataLoader(Subset(train_set, indices), batch_size=32, shuffle=True)
    """
    total = check_int(num_total_samples, "num_total_samples", _OWNER, 0)
    num_replicas, rank = replicas_and_rank(num_replicas, rank, _OWNER)
    check_enough_samples(total, num_replicas, _OWNER)
    if shuffle:
        if seed is None:
            seed = _shared_seed(num_replicas)
        seed = check_int(seed, "seed", _OWNER, -(2**63))
        generator = torch.Generator()
        generator.manual_seed(seed)
        order: list[int] = torch.randperm(total, generator=generator).tolist()
    else:
        order = list(range(total))
    share = -(-total // num_replicas)
    start = total * rank // num_replicas
    return order[start : start + share]
