"""``torch.nn.Sequential`` that can repeat itself."""

from __future__ import annotations

import copy
import warnings
from typing import Literal

import torch

_MODES = ("init", "copy", "share")


def _reinitialize(module: torch.nn.Module) -> list[str]:
    """Call every submodule's ``reset_parameters``; return the ones that have none."""
    skipped = []
    for name, submodule in module.named_modules():
        reset = getattr(submodule, "reset_parameters", None)
        if callable(reset):
            reset()
        elif any(True for _ in submodule.parameters(recurse=False)):
            skipped.append(f"{name} ({type(submodule).__name__})")
    return skipped


class ExtendedSequential(torch.nn.Sequential):
    """A :class:`torch.nn.Sequential` with :meth:`repeat`.

    Example:
        >>> block = ExtendedSequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        >>> model = block.repeat(3)  # three independently initialized blocks
        >>> len(model)
        3
    """

    def repeat(
        self, n_repeat: int, mode: Literal["init", "copy", "share"] = "init"
    ) -> ExtendedSequential:
        """Return a new ``ExtendedSequential`` holding this one ``n_repeat`` times.

        Each repetition is a child (``"0"``, ``"1"``, ...) of the returned sequential,
        so its state dict keys look like ``"1.0.weight"``.

        Args:
            n_repeat: Number of repetitions; ``0`` returns an empty sequential.
            mode: How the repetitions are made:

                - ``'init'``: deep copies whose parameters are re-initialized with each
                  module's ``reset_parameters()`` (modules without one keep copied values
                  and trigger a warning).
                - ``'copy'``: deep copies with the same parameter values, not shared.
                - ``'share'``: this very module repeated; all repetitions share parameters.

        Returns:
            The new ``ExtendedSequential``.

        Raises:
            TypeError: ``n_repeat`` is not an int.
            ValueError: ``n_repeat`` is negative or ``mode`` is not one of the above.
        """
        if mode not in _MODES:
            message = f"mode must be one of 'init', 'copy' or 'share', got {mode!r}"
            raise ValueError(message)
        if not isinstance(n_repeat, int) or isinstance(n_repeat, bool):
            message = f"n_repeat must be an int, got {n_repeat!r}"
            raise TypeError(message)
        if n_repeat < 0:
            message = f"n_repeat must be >= 0, got {n_repeat}"
            raise ValueError(message)
        repeats: list[torch.nn.Module] = []
        skipped: list[str] = []
        for _ in range(n_repeat):
            if mode == "share":
                repeats.append(self)
                continue
            duplicate = copy.deepcopy(self)
            if mode == "init":
                skipped = _reinitialize(duplicate)
            repeats.append(duplicate)
        if skipped:
            message = (
                "ExtendedSequential.repeat(mode='init') cannot re-initialize modules without "
                "a reset_parameters() method; their parameters were copied instead: "
                + ", ".join(skipped)
            )
            warnings.warn(message, UserWarning, stacklevel=2)
        return ExtendedSequential(*repeats)
