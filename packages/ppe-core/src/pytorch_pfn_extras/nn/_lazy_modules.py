"""Linear, convolution and batch normalization modules with a lazily inferred input size."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.nn._lazy import LazyInitializationMixin


class LazyLinear(LazyInitializationMixin, torch.nn.Linear):
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
        self._lazy_begin(in_features is None)
        super().__init__(0 if in_features is None else in_features, *args, **kwargs)
        self._lazy_end()

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


class _LazyConvNd(LazyInitializationMixin):
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
        self._lazy_begin(in_channels is None)
        super().__init__(0 if in_channels is None else in_channels, *args, **kwargs)
        self._lazy_end()


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
        self._lazy_begin(in_channels is None)
        super().__init__(0 if in_channels is None else in_channels, *args, **kwargs)
        self._lazy_end()


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
        self._lazy_begin(in_channels is None)
        super().__init__(0 if in_channels is None else in_channels, *args, **kwargs)
        self._lazy_end()


class _LazyBatchNorm(LazyInitializationMixin):
    """Lazy ``num_features`` for the ``torch.nn.BatchNorm{1,2,3}d`` subclasses below."""

    lazy_parameter_names = ("weight", "bias")
    lazy_buffer_names = ("running_mean", "running_var")
    if TYPE_CHECKING:  # not at runtime: TorchScript cannot read string annotations
        num_features: int

        def _check_input_dim(self, input: torch.Tensor) -> None: ...  # torch's BatchNormNd

    def _lazy_infer_size(self, input: torch.Tensor) -> int:
        self._check_input_dim(input)
        return int(input.shape[1])

    def _lazy_shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        return dict.fromkeys((*self.lazy_parameter_names, *self.lazy_buffer_names), (size,))

    def _lazy_size_from_tensor(self, name: str, tensor: torch.Tensor) -> int | None:
        return int(tensor.shape[0]) if tensor.dim() == 1 else None

    def _lazy_set_size(self, size: int | None) -> None:
        self.num_features = size  # type: ignore[assignment]  # None until inferred


class LazyBatchNorm1d(_LazyBatchNorm, torch.nn.BatchNorm1d):
    """BatchNorm1d module with lazy weight initialization.

    When ``num_features`` is ``None``, it is determined at the first time of the
    forward step from ``C`` of an ``(N, C)`` or ``(N, C, L)`` input.

    Args:
        num_features: Number of features, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.BatchNorm1d` after ``num_features``.
        **kwargs: Keyword arguments of :class:`torch.nn.BatchNorm1d`.
    """

    def __init__(self, num_features: int | None, *args: Any, **kwargs: Any) -> None:
        self._lazy_begin(num_features is None)
        super().__init__(0 if num_features is None else num_features, *args, **kwargs)
        self._lazy_end()


class LazyBatchNorm2d(_LazyBatchNorm, torch.nn.BatchNorm2d):
    """BatchNorm2d module with lazy weight initialization.

    When ``num_features`` is ``None``, it is determined at the first time of the
    forward step from ``C`` of an ``(N, C, H, W)`` input.

    Args:
        num_features: Number of features, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.BatchNorm2d` after ``num_features``.
        **kwargs: Keyword arguments of :class:`torch.nn.BatchNorm2d`.
    """

    def __init__(self, num_features: int | None, *args: Any, **kwargs: Any) -> None:
        self._lazy_begin(num_features is None)
        super().__init__(0 if num_features is None else num_features, *args, **kwargs)
        self._lazy_end()


class LazyBatchNorm3d(_LazyBatchNorm, torch.nn.BatchNorm3d):
    """BatchNorm3d module with lazy weight initialization.

    When ``num_features`` is ``None``, it is determined at the first time of the
    forward step from ``C`` of an ``(N, C, D, H, W)`` input.

    Args:
        num_features: Number of features, or ``None`` to infer it.
        *args: Positional arguments of :class:`torch.nn.BatchNorm3d` after ``num_features``.
        **kwargs: Keyword arguments of :class:`torch.nn.BatchNorm3d`.
    """

    def __init__(self, num_features: int | None, *args: Any, **kwargs: Any) -> None:
        self._lazy_begin(num_features is None)
        super().__init__(0 if num_features is None else num_features, *args, **kwargs)
        self._lazy_end()
