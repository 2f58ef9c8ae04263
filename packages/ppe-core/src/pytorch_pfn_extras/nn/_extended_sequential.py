"""``torch.nn.Sequential`` that can repeat itself."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch

from pytorch_pfn_extras.interop._checks import is_int

_MODES = ("init", "copy", "share")

# Modules that only hold other modules: ``mode='share'`` rebuilds these and shares the rest.
_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def _reset_method(module: torch.nn.Module) -> Callable[[], Any] | None:
    """``reset_parameters``, else ``_reset_parameters`` (e.g. ``MultiheadAttention``)."""
    for name in ("reset_parameters", "_reset_parameters"):
        method = getattr(module, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None


def _holds_state(module: torch.nn.Module) -> bool:
    # Empty tensors (a lazy module's undetermined placeholders) hold nothing to reset.
    return any(
        tensor is not None and tensor.numel() > 0
        for tensor in (*module._parameters.values(), *module._buffers.values())
    )


def _reinitialize(module: torch.nn.Module, prefix: str = "", covered: bool = False) -> list[str]:
    """Re-initialize ``module`` and its submodules; return the ones nothing re-initializes.

    Children are reset before their parent, the order in which a freshly built module
    initializes them, so that a parent's reset (``MultiheadAttention`` zeroing its
    ``out_proj.bias``) has the last word. A module without a reset method is reported
    if it holds parameters or buffers and no ancestor has a reset method that could
    cover it.
    """
    reset = _reset_method(module)
    skipped = []
    for name, child in module.named_children():
        skipped += _reinitialize(child, f"{prefix}{name}.", covered or reset is not None)
    if reset is not None:
        reset()
    elif not covered and _holds_state(module):
        skipped.append(f"{prefix.rstrip('.') or '<block>'} ({type(module).__name__})")
    return skipped


def _share(module: torch.nn.Module) -> torch.nn.Module:
    """Copy the containers of ``module``, sharing every other module and tensor."""
    memo: dict[int, Any] = {}
    for submodule in module.modules():
        if not isinstance(submodule, _CONTAINERS):
            memo[id(submodule)] = submodule
        for tensor in (*submodule._parameters.values(), *submodule._buffers.values()):
            if tensor is not None:
                memo[id(tensor)] = tensor
    # deepcopy returns the object itself for every id in ``memo``.
    return copy.deepcopy(module, memo)


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
                  module's ``reset_parameters()`` or, lacking one, ``_reset_parameters()``
                  (as ``torch.nn.MultiheadAttention`` has). Modules that hold
                  parameters or buffers and have neither (nor an ancestor that has one)
                  keep copied values and trigger a warning.
                - ``'copy'``: deep copies with the same parameter values, not shared.
                - ``'share'``: new containers (``Sequential``, ``ModuleList``,
                  ``ModuleDict``, at any depth, this one included) holding the same
                  modules: all repetitions share their parameters and buffers.

        Returns:
            The new ``ExtendedSequential``.

        Raises:
            TypeError: ``n_repeat`` is not an int.
            ValueError: ``n_repeat`` is negative or ``mode`` is not one of the above.
        """
        if mode not in _MODES:
            message = f"mode must be one of 'init', 'copy' or 'share', got {mode!r}"
            raise ValueError(message)
        if not is_int(n_repeat):
            message = f"n_repeat must be an int, got {n_repeat!r}"
            raise TypeError(message)
        if n_repeat < 0:
            message = f"n_repeat must be >= 0, got {n_repeat}"
            raise ValueError(message)
        repeats: list[torch.nn.Module] = []
        skipped: list[str] = []
        for _ in range(n_repeat):
            if mode == "share":
                repeats.append(_share(self))
                continue
            duplicate = copy.deepcopy(self)
            if mode == "init":
                skipped = _reinitialize(duplicate)
            repeats.append(duplicate)
        if skipped:
            message = (
                "ExtendedSequential.repeat(mode='init') cannot re-initialize modules that "
                "hold parameters or buffers but have no reset_parameters() or "
                "_reset_parameters() method; their values were copied instead: "
                + ", ".join(skipped)
            )
            warnings.warn(message, UserWarning, stacklevel=2)
        return ExtendedSequential(*repeats)
