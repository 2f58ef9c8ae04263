"""FailOnNonNumber: stop training when a parameter or gradient is NaN or infinite."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pytorch_pfn_extras.training._extension import Extension

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class FailOnNonNumber(Extension):
    """An extension to raise RuntimeError if parameters or gradients contain NaN or Inf.

    Every time it is called (each iteration by default), it checks every parameter of the
    manager's models, and their gradients with ``check_grad``. The check is one reduction
    per device and a single synchronization per device; only when it fails are the
    tensors searched for the culprit, which the error names.

    Args:
        check_grad: Also check the gradients (parameters without one are skipped).

    Example:
        >>> manager.extend(extensions.FailOnNonNumber())
        >>> manager.extend(extensions.FailOnNonNumber(), trigger=(100, "iteration"))
    """

    trigger = (1, "iteration")
    needs_model_state = True

    def __init__(self, *, check_grad: bool = True) -> None:
        self._check_grad = check_grad

    def _tensors(
        self, manager: ExtensionsManagerProtocol
    ) -> Iterator[tuple[str, str, str, torch.Tensor]]:
        """``(model name, parameter name, 'data' or 'gradient', tensor)`` to check."""
        for model_name, model in manager.models.items():
            for param_name, parameter in model.named_parameters():
                yield model_name, param_name, "data", parameter.detach()
                if self._check_grad and parameter.grad is not None:
                    yield model_name, param_name, "gradient", parameter.grad.detach()

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Raise if a checked tensor is not finite."""
        flags: dict[torch.device, list[torch.Tensor]] = {}
        for *_, tensor in self._tensors(manager):
            flags.setdefault(tensor.device, []).append(torch.isfinite(tensor).all())
        if all(bool(torch.stack(device_flags).all()) for device_flags in flags.values()):
            return
        for model_name, param_name, what, tensor in self._tensors(manager):
            if not bool(torch.isfinite(tensor).all()):
                kind = "NaN" if bool(torch.isnan(tensor).any()) else "Inf"
                message = (
                    f"Kill the process since parameters in {model_name!r} diverged: the "
                    f"{what} of parameter {param_name!r} contains {kind}"
                )
                raise RuntimeError(message)
