"""``LazyConv1d/2d/3d``: convolutions with a lazily inferred ``in_channels``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.nn._lazy_sized import _LazySizeMixin


class _LazyConvNd(_LazySizeMixin):
    """Lazy ``in_channels`` for the ``torch.nn.Conv{1,2,3}d`` subclasses below."""

    lazy_parameter_names = ("weight",)
    if TYPE_CHECKING:  # not at runtime: TorchScript cannot read string annotations
        _spatial_dims: int
        # Attributes of torch.nn.modules.conv._ConvNd, which the concrete classes inherit.
        groups: int
        out_channels: int
        kernel_size: tuple[int, ...]
        in_channels: int

    def _lazy_infer_size(self, input: torch.Tensor) -> int:
        n = self._spatial_dims
        if input.dim() not in (n + 1, n + 2):
            message = (
                f"{type(self).__name__} needs a {n + 1}D (unbatched) or {n + 2}D (batched) "
                f"input to infer in_channels, got shape {tuple(input.shape)}"
            )
            raise ValueError(message)
        channels = int(input.shape[-(n + 1)])
        if channels % self.groups != 0:
            message = (
                f"{type(self).__name__} inferred in_channels={channels} from input shape "
                f"{tuple(input.shape)}, which is not divisible by groups={self.groups}"
            )
            raise ValueError(message)
        return channels

    def _lazy_shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        return {"weight": (self.out_channels, size // self.groups, *self.kernel_size)}

    def _lazy_size_from_tensor(self, name: str, tensor: torch.Tensor) -> int | None:
        if tensor.dim() != self._spatial_dims + 2:
            return None
        return int(tensor.shape[1]) * self.groups

    def _lazy_set_size(self, size: int | None) -> None:
        self.in_channels = size  # type: ignore[assignment]  # None until inferred


class LazyConv1d(_LazyConvNd, torch.nn.Conv1d):
    """Conv1d module with lazy weight initialization.

    When ``in_channels`` is ``None``, it is determined at the first time of the forward
    step from the input's channel dimension (``C`` of ``(N, C, L)`` or ``(C, L)``).

    Args:
        in_channels: Number of input channels, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.Conv1d` after ``in_channels``.
        **kwargs: Keyword arguments of :class:`torch.nn.Conv1d`.
    """

    _spatial_dims = 1

    def __init__(self, in_channels: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(in_channels, *args, **kwargs)


class LazyConv2d(_LazyConvNd, torch.nn.Conv2d):
    """Conv2d module with lazy weight initialization.

    When ``in_channels`` is ``None``, it is determined at the first time of the forward
    step from the input's channel dimension (``C`` of ``(N, C, H, W)`` or ``(C, H, W)``).

    Args:
        in_channels: Number of input channels, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.Conv2d` after ``in_channels``.
        **kwargs: Keyword arguments of :class:`torch.nn.Conv2d`.

    Example:
        >>> conv = LazyConv2d(None, 8, 3)
        >>> conv(torch.zeros(1, 5, 10, 10)).shape
        torch.Size([1, 8, 8, 8])
    """

    _spatial_dims = 2

    def __init__(self, in_channels: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(in_channels, *args, **kwargs)


class LazyConv3d(_LazyConvNd, torch.nn.Conv3d):
    """Conv3d module with lazy weight initialization.

    When ``in_channels`` is ``None``, it is determined at the first time of the forward
    step from the input's channel dimension (``C`` of ``(N, C, D, H, W)`` or
    ``(C, D, H, W)``).

    Args:
        in_channels: Number of input channels, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.Conv3d` after ``in_channels``.
        **kwargs: Keyword arguments of :class:`torch.nn.Conv3d`.
    """

    _spatial_dims = 3

    def __init__(self, in_channels: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(in_channels, *args, **kwargs)
