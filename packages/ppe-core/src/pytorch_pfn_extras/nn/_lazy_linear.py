"""``LazyLinear``: ``torch.nn.Linear`` with a lazily inferred ``in_features``."""

from __future__ import annotations

from typing import Any

import torch

from pytorch_pfn_extras.nn._lazy_sized import _LazySizeMixin


class LazyLinear(_LazySizeMixin, torch.nn.Linear):
    """Linear module with lazy weight initialization.

    When ``in_features`` is ``None``, it is determined at the first time of the forward
    step from the size of the input's last dimension. The module is a
    :class:`torch.nn.Linear` in every other respect.

    Args:
        in_features: Size of each input sample, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.Linear` after ``in_features``.
        **kwargs: Keyword arguments of :class:`torch.nn.Linear`.

    Example:
        >>> layer = LazyLinear(None, 10)
        >>> layer(torch.zeros(4, 3)).shape
        torch.Size([4, 10])
        >>> layer.in_features
        3
    """

    lazy_parameter_names = ("weight",)

    def __init__(self, in_features: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(in_features, *args, **kwargs)

    def _lazy_infer_size(self, input: torch.Tensor) -> int:
        if input.dim() == 0:
            message = "LazyLinear needs an input with at least 1 dimension to infer in_features, got a 0-dim tensor"
            raise ValueError(message)
        return int(input.shape[-1])

    def _lazy_shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        return {"weight": (self.out_features, size)}

    def _lazy_size_from_tensor(self, name: str, tensor: torch.Tensor) -> int | None:
        return int(tensor.shape[1]) if tensor.dim() == 2 else None

    def _lazy_set_size(self, size: int | None) -> None:
        self.in_features = size  # type: ignore[assignment]  # None until inferred
