"""In-place arithmetic on many tensors at once (``torch._foreach_*`` kernels)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class _ForeachWrapper:
    """Applies one operation to a list of tensors with torch's multi-tensor kernels."""

    def multiply(self, tensors: Sequence[torch.Tensor], value: float) -> None:
        """Multiply every tensor by ``value`` in place.

        Args:
            tensors: Tensors of any shapes, dtypes and devices.
            value: The factor.
        """
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for tensor in tensors:
            groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
        with torch.no_grad():
            for group in groups.values():
                torch._foreach_mul_(group, value)


_WRAPPER = _ForeachWrapper()


def get_foreach_wrapper() -> _ForeachWrapper:
    """Return the helper that applies an operation to many tensors at once.

    Its ``multiply(tensors, value)`` scales every tensor in place, with one kernel
    launch per device and dtype instead of one per tensor (e.g. to average gradients
    in a custom ``reduce_function``).

    Example:
        >>> grads = [torch.ones(2), torch.ones(3, 3)]
        >>> get_foreach_wrapper().multiply(grads, 0.5)
        >>> grads[1][0, 0].item()
        0.5
    """
    return _WRAPPER
