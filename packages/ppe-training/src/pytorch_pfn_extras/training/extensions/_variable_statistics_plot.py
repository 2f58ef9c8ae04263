"""VariableStatisticsPlot: mean, std and percentiles of parameters and gradients over time."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from pytorch_pfn_extras.interop import from_numpy_dtype
from pytorch_pfn_extras.training._extension import PRIORITY_READER
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger
from pytorch_pfn_extras.training.extensions import _png_render
from pytorch_pfn_extras.training.extensions._bytes import write_bytes
from pytorch_pfn_extras.training.extensions._percentiles import linear_percentiles
from pytorch_pfn_extras.training.extensions._plot_report import (
    PlotReport,
    PngExtension,
    plot_filename,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

_DEFAULT_SIGMAS = (0, 0.13, 2.28, 15.87, 50, 84.13, 97.72, 99.87, 100)

FloatArray = npt.NDArray[np.floating[Any]]


_NUMPY_FLOATS = (torch.float32, torch.float64)


def _as_tensor(a: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a`` (a tensor, an array or numbers) as a tensor of a floating dtype (float64 for
    integers), or of ``dtype``; a tensor stays on its device, detached."""
    tensor = a.detach() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a))
    if dtype is None and not tensor.is_floating_point():
        dtype = torch.float64
    return tensor if dtype is None else tensor.to(dtype)


def _axes_first(x: torch.Tensor, axis: int | Sequence[int] | None) -> torch.Tensor:
    """``x`` with the reduced axes flattened into the first one (all of them for ``None``)."""
    if axis is None:
        return x.reshape(-1)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return x.movedim(axes, tuple(range(len(axes)))).flatten(0, len(axes) - 1)


def percentile(a: Any, q: Any, axis: int | Sequence[int] | None) -> torch.Tensor:
    """The ``q``-th percentiles (in ``[0, 100]``) of ``a`` along ``axis``, as NumPy computes
    them (linear interpolation; NaN where a reduced slice holds a NaN).

    Computed on the tensor's device, for tensors of any size (``torch.quantile`` is limited
    to 2**24 elements).

    Args:
        a: A tensor (an array or numbers are turned into one).
        q: A percentile or a sequence of percentiles.
        axis: Axis or axes to reduce; ``None`` reduces all of them.

    Returns:
        A tensor of ``a``'s floating dtype (float64 for integers); for a sequence ``q``, its
        first axis runs over ``q`` (as in ``numpy.percentile``).

    Raises:
        ValueError: A percentile outside ``[0, 100]``, or nothing to reduce.
    """
    tensor = _as_tensor(a)
    scalar = np.ndim(q) == 0
    sigmas = tuple(float(s) for s in np.atleast_1d(np.asarray(q, dtype=np.float64)))
    if any(not 0 <= s <= 100 for s in sigmas):
        message = f"percentile: q must be in [0, 100], got {q!r}"
        raise ValueError(message)
    x = _axes_first(tensor, axis)
    if x.shape[0] == 0:
        message = (
            f"percentile: nothing to reduce along axis={axis!r} of shape {tuple(tensor.shape)}"
        )
        raise ValueError(message)
    if x.device.type == "cpu" and x.dtype in _NUMPY_FLOATS:
        # NumPy selects the percentiles (partition) where a sort orders every value: 3x as
        # fast for 4M values on the 2-core CI machine (0.35 s against 1.1 s). Shared memory.
        result = torch.from_numpy(np.asarray(np.percentile(x.numpy(), sigmas, axis=0)))
    else:
        result = linear_percentiles(x, sigmas)
        result = torch.where(x.isnan().any(dim=0, keepdim=True), torch.nan, result)
    result = result.to(tensor.dtype)
    return result[0] if scalar else result


def matplotlib_savefun(target: Any, file_o: IO[bytes]) -> None:
    """``savefun`` of a writer: save the matplotlib figure ``target`` as PNG into ``file_o``."""
    target.savefig(file_o, format="png")


class Reservoir:
    """A uniform random sample of at most ``size`` items of a stream (reservoir sampling).

    Each item added is kept with probability ``size / n`` (``n`` items seen so far), replacing
    a kept item chosen uniformly, so every item of the stream is in the sample with the same
    probability.

    The random choices come from a generator seeded with ``seed``, and its state is part of
    :meth:`state_dict`: the same stream gives the same sample, also across a resume.

    Args:
        size: Largest number of items kept.
        data_shape: Shape of one item.
        dtype: NumPy dtype of the items.
        seed: Seed of the sampling's random generator.

    Example:
        >>> reservoir = Reservoir(100, data_shape=(3,))
        >>> reservoir.add(np.zeros(3), idx=0)
        >>> idxs, data = reservoir.get_data()
    """

    def __init__(
        self, size: int, data_shape: tuple[int, ...], dtype: Any = np.float32, *, seed: int = 0
    ) -> None:
        if type(size) is not int or size < 1:
            message = f"Reservoir: size must be a positive int, got {size!r}"
            raise ValueError(message)
        self.size = size
        self.data: FloatArray = np.zeros((size, *data_shape), dtype=dtype)
        self.idxs: npt.NDArray[np.int64] = np.zeros((size,), dtype=np.int64)
        self.counter = 0
        self._rng = np.random.default_rng(seed)

    def next_slot(self) -> int | None:
        """Count one more item of the stream; return the slot it goes to, ``None`` if dropped.

        Lets a caller skip computing an item the sample would not keep; fill the slot with
        :meth:`put`.
        """
        if self.counter < self.size:
            slot: int | None = self.counter
        else:
            slot = int(self._rng.integers(0, self.counter + 1))
            if slot >= self.size:
                slot = None
        self.counter += 1
        return slot

    def put(self, slot: int, x: Any, idx: int) -> None:
        """Store the item ``x`` with the index ``idx`` in ``slot`` (from :meth:`next_slot`)."""
        self.data[slot] = np.asarray(x)
        self.idxs[slot] = idx

    def add(self, x: Any, idx: int | None = None) -> None:
        """Offer the item ``x`` with the index ``idx`` (the number of items seen when ``None``)."""
        index = self.counter if idx is None else idx
        slot = self.next_slot()
        if slot is not None:
            self.put(slot, x, index)

    def get_data(self) -> tuple[npt.NDArray[np.int64], FloatArray]:
        """Return ``(indices, items)`` of the sample, ordered by index."""
        n = min(self.counter, self.size)
        order = np.argsort(self.idxs[:n], kind="stable")
        return self.idxs[:n][order], self.data[:n][order]

    def state_dict(self) -> dict[str, Any]:
        """Return the sample, the number of items seen and the generator's state (loadable
        with ``torch.load(weights_only=True)``)."""
        n = min(self.counter, self.size)
        return {
            "counter": self.counter,
            "idxs": self.idxs[:n].tolist(),
            "data": torch.from_numpy(self.data[:n].copy()),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        data = to_load["data"]
        if isinstance(data, torch.Tensor):
            data = data.numpy()
        data = np.asarray(data, dtype=self.data.dtype)
        n = len(data)
        if n > self.size or data.shape[1:] != self.data.shape[1:]:
            message = (
                f"Reservoir: cannot load {data.shape} items into a reservoir of {self.data.shape}"
            )
            raise ValueError(message)
        self.data[:n] = data
        self.idxs[:n] = np.asarray(to_load["idxs"], dtype=np.int64)
        self.counter = int(to_load["counter"])
        if "rng" in to_load:
            self._rng.bit_generator.state = dict(to_load["rng"])


class Statistician:
    """Computes the chosen statistics of a tensor along an axis.

    Args:
        collect_mean: Compute the mean.
        collect_std: Compute the standard deviation (NumPy's, ``ddof=0``).
        percentile_sigmas: Percentiles to compute, in ``[0, 100]``.

    Example:
        >>> Statistician(True, True, (0, 50, 100))(torch.arange(5.0), dtype=torch.float32)
        {'mean': tensor(2.), 'std': tensor(1.4142), 'percentile': tensor([0., 2., 4.])}
    """

    def __init__(
        self, collect_mean: bool, collect_std: bool, percentile_sigmas: float | Iterable[float]
    ) -> None:
        self.collect_mean = collect_mean
        self.collect_std = collect_std
        sigmas = np.atleast_1d(np.asarray(percentile_sigmas, dtype=np.float64))
        if sigmas.ndim != 1 or np.any((sigmas < 0) | (sigmas > 100)):
            message = f"percentile_sigmas must be numbers in [0, 100], got {percentile_sigmas!r}"
            raise ValueError(message)
        self.percentile_sigmas: tuple[float, ...] = tuple(float(s) for s in sigmas)

    def __call__(
        self, x: Any, axis: int | Sequence[int] | None = 0, dtype: Any = None
    ) -> dict[str, torch.Tensor]:
        """Return ``{'mean', 'std', 'percentile'}`` (those chosen) of ``x`` along ``axis``.

        The statistics are tensors, computed on ``x``'s device.

        Args:
            x: A tensor (an array is turned into one); an empty one gives NaN statistics.
            axis: Axis or axes to reduce; ``None`` reduces all of them.
            dtype: dtype of the computation and of the results: a ``torch.dtype`` (or a
                NumPy dtype); ``torch.float64`` by default.

        Raises:
            TypeError: ``dtype`` is not a dtype of PyTorch or NumPy.
        """
        tensor = _as_tensor(x, _torch_dtype(dtype))
        if tensor.numel() == 0:
            tensor = torch.full((1,), torch.nan, dtype=tensor.dtype, device=tensor.device)
            axis = None
        return self.collect(tensor, axis)

    def collect(self, x: torch.Tensor, axis: int | Sequence[int] | None) -> dict[str, torch.Tensor]:
        """The statistics of the tensor ``x`` along ``axis``, in ``x``'s dtype."""
        dim = axis if axis is None or isinstance(axis, int) else tuple(axis)
        stats: dict[str, torch.Tensor] = {}
        if self.collect_mean:
            stats["mean"] = x.mean(dim=dim)
        if self.collect_std:
            stats["std"] = x.std(dim=dim, correction=0)
        if self.percentile_sigmas:
            stats["percentile"] = percentile(x, self.percentile_sigmas, axis=axis)
        return stats


def _torch_dtype(dtype: Any) -> torch.dtype:
    if dtype is None:
        return torch.float64
    if isinstance(dtype, torch.dtype):
        return dtype
    return from_numpy_dtype(dtype)


def _tensors(targets: Any) -> list[torch.Tensor]:
    items = targets if isinstance(targets, (list, tuple)) else [targets]
    tensors: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, torch.nn.Module):
            tensors.extend(item.parameters())
        elif isinstance(item, torch.Tensor):
            tensors.append(item)
        else:
            message = (
                "VariableStatisticsPlot: targets must be tensors, modules or a list of them, "
                f"got {type(item).__name__}"
            )
            raise TypeError(message)
    return tensors


class VariableStatisticsPlot(PngExtension):
    """An extension to plot statistics of parameters and of their gradients.

    It runs every iteration and keeps a uniform sample of at most ``max_sample_size``
    iterations (a :class:`Reservoir`, so memory stays bounded); for each iteration the sample
    keeps, it computes, for each target tensor (the parameters of a module), the mean, the
    standard deviation and the percentiles of its values and of its gradient, and averages
    them over the tensors (iterations that are not kept cost nothing). When ``trigger`` fires, it
    draws one panel per kind (``data``, ``grad``): the percentiles as shaded bands
    (symmetric pairs, darker towards the median), the median, and the mean and
    mean ± std as lines, against the iteration, and writes the PNG through the manager's
    writer. The sample and the trigger are saved in snapshots.

    As with :class:`PlotReport`, the image is drawn by the plot worker process off the
    training path and written at a later call (at ``finalize`` at the latest), unless
    ``background=False``; on a standalone figure either way (pyplot and the backend are left
    alone).

    Args:
        targets: A tensor, a module, or a list of them.
        max_sample_size: Largest number of iterations kept for the plot.
        report_data: Compute and plot the statistics of the values.
        report_grad: Compute and plot the statistics of the gradients (tensors without a
            gradient are skipped; NaN when none has one).
        plot_mean: Compute and plot the mean.
        plot_std: Compute and plot the standard deviation (as mean ± std).
        percentile_sigmas: Percentiles to plot, in ``[0, 100]``.
        trigger: When to write the image; each epoch by default.
        filename: Image name under the output directory (``'statistics.png'`` by default),
            a format string filled with ``epoch`` and ``iteration``; ``file_name`` is an alias.
        figsize: Size of the figure in inches; ``(6.4 * panels, 4.8)`` by default.
        marker: Marker of the mean and std lines.
        grid: Draw the grid.
        per_rank: In a job of several processes (an initialized process group of more than
            one rank), every rank writes its own image, named with its rank before the
            suffix (``statistics.rank1.png`` for ``statistics.png``). By default only global
            rank 0 draws and writes it; every rank keeps its sample. The rank is read at the
            first write.
        **kwargs: ``file_name``, ``writer`` (a writer to use instead of the manager's) and
            ``background`` (``True`` by default: draw in the plot worker).

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: Nothing to plot, or bad percentiles.
        TypeError: An unknown keyword argument, or targets of the wrong type.

    Example:
        >>> manager.extend(VariableStatisticsPlot(model, trigger=(100, "iteration")))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER
    needs_model_state = True
    _kind = "variable_statistics"

    def __init__(
        self,
        targets: Any,
        max_sample_size: int = 1000,
        report_data: bool = True,
        report_grad: bool = True,
        plot_mean: bool = True,
        plot_std: bool = True,
        percentile_sigmas: float | tuple[float, ...] = _DEFAULT_SIGMAS,
        trigger: TriggerLike = (1, "epoch"),
        filename: str | None = None,
        figsize: tuple[float, float] | None = None,
        marker: str | None = None,
        grid: bool = True,
        *,
        per_rank: bool = False,
        **kwargs: Any,
    ) -> None:
        filename = plot_filename("VariableStatisticsPlot", filename, "statistics.png", kwargs)
        self._keys = tuple(
            key for key, chosen in (("data", report_data), ("grad", report_grad)) if chosen
        )
        self._statistician = Statistician(plot_mean, plot_std, percentile_sigmas)
        n_stats = int(plot_mean) + int(plot_std) + len(self._statistician.percentile_sigmas)
        if not self._keys or n_stats == 0:
            message = (
                "VariableStatisticsPlot has nothing to plot: report_data or report_grad, and "
                "plot_mean, plot_std or percentile_sigmas must be chosen"
            )
            raise ValueError(message)
        self._targets = _tensors(targets)
        self._reservoir = Reservoir(max_sample_size, (len(self._keys), n_stats))
        self._plot_trigger = get_trigger(trigger)
        self._figsize = figsize
        self._marker = marker
        self._grid = grid
        self._init_png(filename, per_rank, kwargs)

    available = staticmethod(PlotReport.available)

    def statistics(self) -> dict[str, dict[str, Any]]:
        """The statistics of the targets now: ``{'data'/'grad': {'mean', 'std', 'percentile'}}``.

        Each statistic is the mean over the target tensors of that tensor's statistic (a
        NumPy value); they are computed on the tensors' device and copied to the host once
        per kind.
        """
        result: dict[str, dict[str, Any]] = {}
        with torch.no_grad():
            for key in self._keys:
                tensors = self._targets if key == "data" else [t.grad for t in self._targets]
                per_tensor = [self._statistician(t.reshape(-1)) for t in tensors if t is not None]
                if not per_tensor:
                    per_tensor = [self._statistician(torch.zeros(0))]
                device = next(iter(per_tensor[0].values())).device
                means = {
                    name: torch.stack([stats[name].to(device) for stats in per_tensor]).mean(0)
                    for name in per_tensor[0]
                }
                host = torch.cat([m.reshape(-1) for m in means.values()]).cpu().numpy()
                sizes = np.cumsum([m.numel() for m in means.values()])[:-1]
                result[key] = {
                    name: part.reshape(m.shape)
                    for (name, m), part in zip(means.items(), np.split(host, sizes))
                }
        return result

    def _row(self, stats: Mapping[str, Any]) -> FloatArray:
        parts = [
            np.atleast_1d(stats[name]) for name in ("mean", "std", "percentile") if name in stats
        ]
        return np.concatenate(parts)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Sample the statistics; write the plot when the trigger fires.

        The statistics are computed only for the iterations the sample keeps.
        """
        if self._images:
            self._poll()
        slot = self._reservoir.next_slot()
        if slot is not None:
            stats = self.statistics()
            row = np.stack([self._row(stats[key]) for key in self._keys])
            self._reservoir.put(slot, row, manager.iteration)
        if self._plot_trigger(manager):
            self._write(manager)

    def _spec(self) -> dict[str, Any]:
        idxs, data = self._reservoir.get_data()
        statistician = self._statistician
        return {
            "keys": list(self._keys),
            "idxs": idxs,
            "data": data,
            "collect_mean": statistician.collect_mean,
            "collect_std": statistician.collect_std,
            "sigmas": statistician.percentile_sigmas,
            "figsize": self._figsize,
            "marker": self._marker,
            "grid": self._grid,
            "rc": _png_render.changed_rc(),
        }

    def save_plot_using_module(self, plt: Any, manager: ExtensionsManagerProtocol) -> None:
        """Draw the plot on a figure of ``plt`` (pyplot, or a module with its ``figure`` and
        ``close``) in this process and write it now, as PPE's extension does at its trigger
        (in a job of several processes, from the ranks that write the image: see
        ``per_rank``).

        Args:
            plt: ``matplotlib.pyplot``.
            manager: The manager whose writer and output directory are used.
        """
        target = self._target(manager)
        if target is None:
            return
        writer, filename = target
        spec = self._spec()
        figure = plt.figure(
            figsize=_png_render.variable_statistics_size(spec), layout="constrained"
        )
        try:
            _png_render.draw_variable_statistics_on(figure, spec)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png")
        finally:
            plt.close(figure)
        writer(filename, manager.out, buffer.getvalue(), savefun=write_bytes)

    def state_dict(self) -> dict[str, Any]:
        """Return the sampled statistics and the state of the plot trigger."""
        return {
            "reservoir": self._reservoir.state_dict(),
            "plot_trigger": self._plot_trigger.state_dict(),
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self._reservoir.load_state_dict(to_load["reservoir"])
        self._plot_trigger.load_state_dict(to_load.get("plot_trigger", {}))
