"""DistributedValidationSampler: each sample of a dataset on exactly one rank."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
import torch.utils.data

from pytorch_pfn_extras.distributed._collective import check_int, replicas_and_rank


def _dataset_length(dataset: Any, owner: str) -> int:
    try:
        return len(dataset)
    except TypeError:
        message = f"{owner} needs a dataset with len(), got {type(dataset).__name__}"
        raise TypeError(message) from None


def check_enough_samples(num_samples: int, num_replicas: int, owner: str) -> None:
    """Every rank needs at least one sample."""
    if num_samples < num_replicas:
        message = (
            f"{owner}: the dataset has {num_samples} samples, fewer than the {num_replicas} "
            "replicas; every rank needs at least one sample (use fewer processes or a larger "
            "dataset)"
        )
        raise ValueError(message)


class DistributedValidationSampler(torch.utils.data.Sampler[int]):
    """A sampler that gives each rank its share of a dataset, every sample exactly once.

    Unlike :class:`torch.utils.data.distributed.DistributedSampler`, which pads the ranks'
    shares to equal sizes with duplicated samples, the shares here differ by at most one
    sample and together hold each index of the dataset once: evaluating every share and
    reducing the sums over the ranks (:class:`~pytorch_pfn_extras.training.extensions.\
DistributedEvaluator`) gives the metrics of the whole dataset. The ranks may then run
    different numbers of batches, which is fine for an evaluation (its only collective comes
    after the loop), not for training.

    The indices are shuffled (when ``shuffle``) by a permutation drawn from ``seed`` (plus the
    epoch given to :meth:`set_epoch`), the same on every rank; that order is cut into
    ``num_replicas`` consecutive parts as ``numpy.array_split`` cuts it (the first
    ``len(dataset) % num_replicas`` parts one longer), and rank ``r`` takes part ``r``, as
    in PPE: without shuffling, rank 0 of 2 takes ``0 .. ceil(n / 2) - 1``.

    Args:
        dataset: The dataset (it needs ``len()``).
        num_replicas: Number of ranks; the world size of ``torch.distributed`` by default.
        rank: This process's rank; that of ``torch.distributed`` by default.
        shuffle: Shuffle the indices (with the same permutation on every rank).
        seed: Seed of the permutation; must be the same on every rank.

    Raises:
        TypeError: The dataset has no ``len()``, or an argument is not an integer.
        ValueError: ``rank`` is outside ``[0, num_replicas)``, or the dataset has fewer
            samples than ``num_replicas``.
        RuntimeError: ``num_replicas`` or ``rank`` is ``None`` without torch.distributed.

    Example:
        >>> sampler = DistributedValidationSampler(val_set, shuffle=False)
        >>> loader = torch.utils.data.DataLoader(val_set, batch_size=64, sampler=sampler)
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        owner = "DistributedValidationSampler"
        self.dataset_length = _dataset_length(dataset, owner)
        self.num_replicas, self.rank = replicas_and_rank(num_replicas, rank, owner)
        check_enough_samples(self.dataset_length, self.num_replicas, owner)
        self.shuffle = bool(shuffle)
        self.seed = check_int(seed, "seed", owner, -(2**63))
        self.epoch = 0
        # numpy.array_split's parts: the first `longer` ranks hold one more sample.
        base, longer = divmod(self.dataset_length, self.num_replicas)
        self.num_samples = base + int(self.rank < longer)
        self._start = base * self.rank + min(self.rank, longer)

    def set_epoch(self, epoch: int) -> None:
        """Draw the permutation of this epoch (``seed + epoch``), as DistributedSampler does.

        Args:
            epoch: The epoch number; the same on every rank.
        """
        self.epoch = check_int(epoch, "epoch", "DistributedValidationSampler.set_epoch", 0)

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.dataset_length, generator=generator).tolist()
            return iter(order[self._start : self._start + self.num_samples])
        return iter(range(self._start, self._start + self.num_samples))

    def __len__(self) -> int:
        return self.num_samples
