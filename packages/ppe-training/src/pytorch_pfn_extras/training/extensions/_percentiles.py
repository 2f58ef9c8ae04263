"""NumPy's percentiles (linear interpolation) of tensors of any size, on their own device.

Shared by ParameterStatistics and VariableStatisticsPlot. ``torch.quantile`` refuses inputs of
more than 2**24 elements; a sort does not.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=256)
def _interpolation(
    q: tuple[float, ...], size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices below and above each percentile of a sorted vector of ``size``, and the weights.

    They only depend on the size: cached on the device, they cost no copy per call.
    """
    last = size - 1
    positions = [p / 100 * last for p in q]
    lower = [int(p) for p in positions]
    upper = [min(i + 1, last) for i in lower]
    fraction = [p - i for p, i in zip(positions, lower)]
    return (
        torch.tensor(lower, device=device),
        torch.tensor(upper, device=device),
        torch.tensor(fraction, dtype=torch.float64, device=device),
    )


def linear_percentiles(x: torch.Tensor, q: tuple[float, ...], dim: int = 0) -> torch.Tensor:
    """The ``q``-th percentiles (in ``[0, 100]``) of ``x`` along ``dim``, in float64.

    The result has the shape of ``x`` with ``dim`` of length ``len(q)``. ``x`` must not be
    empty along ``dim``; a NaN sorts last (NumPy would give NaN: callers that care check).
    """
    ordered = torch.sort(x, dim=dim).values
    lower, upper, fraction = _interpolation(q, x.shape[dim], x.device)
    low = ordered.index_select(dim, lower).to(torch.float64)
    high = ordered.index_select(dim, upper).to(torch.float64)
    shape = [1] * x.dim()
    shape[dim] = len(q)
    return low + (high - low) * fraction.reshape(shape)
