"""``LazyBatchNorm1d/2d/3d``: batch normalization with a lazily inferred ``num_features``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.nn._lazy_sized import _LazySizeMixin


class _LazyBatchNorm(_LazySizeMixin):
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
        super().__init__(num_features, *args, **kwargs)


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
        super().__init__(num_features, *args, **kwargs)


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
        super().__init__(num_features, *args, **kwargs)
