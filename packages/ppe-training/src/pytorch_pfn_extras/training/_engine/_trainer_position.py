"""The trainer's position in its data, saved with the manager's state of each rank."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from pytorch_pfn_extras.training._manager_protocol import StateObjectProtocol


def _rng_state(loader: Any) -> dict[str, Any]:
    """Every random state a data pipeline may draw from, in a ``weights_only``-safe form."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    generator = getattr(loader, "generator", None)
    if isinstance(generator, torch.Generator):
        state["loader_generator"] = generator.get_state()
    return state


def _set_rng_state(state: Mapping[str, Any], loader: Any) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    generator = getattr(loader, "generator", None)
    if "loader_generator" in state and isinstance(generator, torch.Generator):
        generator.set_state(state["loader_generator"])


class TrainerPosition:
    """Where the trainer is in its data, as a state object of the manager.

    Its state holds the random states at the start of the current epoch and at the time of
    saving, and a stateful loader's own position (torchdata's ``StatefulDataLoader``). A
    loaded state is applied when the next epoch's iterator is made, which replays the
    epoch up to the saved batch (or lets a stateful loader resume there itself).
    """

    def __init__(self) -> None:
        self.loader: Any = None
        self.epoch_rng: dict[str, Any] | None = None
        self._resume: Mapping[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": _rng_state(self.loader)}
        if self.epoch_rng is not None:
            state["epoch_rng"] = self.epoch_rng
        if isinstance(self.loader, StateObjectProtocol):
            # torchdata's StatefulDataLoader: its position (sampler, workers) resumes exactly.
            state["loader"] = self.loader.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        self._resume = state

    def epoch_iterator(self, loader: Iterable[Any], position: int) -> Iterator[Any]:
        """An iterator over the epoch's batches from batch ``position`` on, with the random
        states of an uninterrupted run (the loaded ones, the first time after a resume)."""
        resume, self._resume = self._resume, None
        if resume is not None:
            # At an epoch boundary, the state saved with the snapshot is the one the next
            # epoch starts from; in the middle of an epoch, the epoch is replayed from its
            # start (the same shuffle) up to the snapshot, whose state is restored after.
            start = resume.get("epoch_rng") if position else resume["rng"]
            if start is not None:
                _set_rng_state(start, loader)
        if (
            position
            and resume is not None
            and "loader" in resume
            and isinstance(loader, StateObjectProtocol)
        ):
            # A stateful loader resumes in the middle of its epoch by itself: no replay. The
            # random states are restored after iter(), which draws the (unused) seeds of a
            # new epoch from the loader's generator.
            loader.load_state_dict(resume["loader"])
            resumed = iter(loader)
            _set_rng_state(resume["rng"], loader)
            self.epoch_rng = resume.get("epoch_rng")
            return resumed
        self.epoch_rng = _rng_state(loader)
        iterator = iter(loader)
        for _ in range(position):  # skip the batches trained on before the snapshot
            try:
                next(iterator)
            except StopIteration:
                iterator = iter(loader)
        if position and resume is not None:
            _set_rng_state(resume["rng"], loader)
        return iterator
