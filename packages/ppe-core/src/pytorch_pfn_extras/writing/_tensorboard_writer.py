"""``TensorBoardWriter``: scalars of log entries as TensorBoard events."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy
import torch

from pytorch_pfn_extras.writing._writer_base import SaveFun, Writer, _path_str

__all__ = ["TensorBoardWriter"]

_MISSING = (
    'TensorBoardWriter needs tensorboard: pip install "ppe-core[tensorboard]"; '
    "nothing will be written"
)


def _scalar(value: Any) -> float | None:
    # Real scalars only: Python/NumPy numbers, one-element real tensors and arrays.
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.layout != torch.strided:
            return None
        return float(value.item())
    if isinstance(value, numpy.ndarray | numpy.generic):
        if value.size != 1 or not numpy.issubdtype(value.dtype, numpy.number):
            return None
        if numpy.iscomplexobj(value):
            return None
        return float(value.item())
    return None


class TensorBoardWriter(Writer):
    """Write the scalars of log entries as TensorBoard events.

    Meant as the ``writer`` of ``LogReport``: each call takes a dict (or a list
    of dicts, whose last element is used), and writes every real scalar value
    (Python numbers, one-element tensors and arrays) with
    ``SummaryWriter.add_scalar(key, value, target["iteration"])``. Other values
    are skipped. The event files go to ``out_dir`` given here, or else to the
    ``out_dir`` of the first call (:meth:`initialize` does not move them).
    ``savefun`` and ``append`` are ignored.

    Without tensorboard installed, constructing the writer warns and calls
    write nothing.

    Args:
        savefun: Ignored (accepted for signature compatibility).
        fs: Ignored: event files are written by tensorboard itself.
        out_dir: Log directory of the event files.
        stats: Keys to write; all scalar keys when ``None``.
        **kwds: Keyword arguments of ``torch.utils.tensorboard.SummaryWriter``
            (``flush_secs``, ``filename_suffix``...).

    Example:
        >>> writer = TensorBoardWriter(out_dir="runs/exp1", stats=["main/loss"])
        >>> manager.extend(extensions.LogReport(writer=writer))
    """

    def __init__(
        self,
        savefun: SaveFun | None = None,
        fs: Any = None,
        out_dir: str = "",
        stats: Iterable[str] | None = None,
        **kwds: Any,
    ) -> None:
        super().__init__(fs=fs, out_dir=out_dir)
        if stats is not None:
            if isinstance(stats, str) or not isinstance(stats, Iterable):
                message = (
                    f"TensorBoardWriter: stats must be an iterable of keys or None, got {stats!r}"
                )
                raise TypeError(message)
            stats = frozenset(stats)
        self._stats: frozenset[str] | None = stats
        self._log_dir = self.out_dir
        self._kwds = kwds
        self._summary: Any = None
        self._available = True
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            warnings.warn(_MISSING, stacklevel=2)
            self._available = False
        else:
            self._summary_class = SummaryWriter

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: SaveFun | None = None,
        append: bool = False,
    ) -> None:
        """Write the scalars of ``target`` (a dict, or a list of dicts) at its iteration.

        Raises:
            TypeError: ``target`` is not a dict (nor a list ending with one).
            ValueError: ``target`` has no ``"iteration"`` entry.
        """
        entry = target[-1] if isinstance(target, list) and target else target
        if not isinstance(entry, Mapping):
            message = (
                "TensorBoardWriter: target must be a dict of scalars (or a list whose last "
                f"element is one), got {type(target).__name__}: {target!r:.200}"
            )
            raise TypeError(message)
        if "iteration" not in entry:
            message = (
                "TensorBoardWriter: target needs an 'iteration' entry (the step), got keys "
                f"{sorted(map(str, entry))}"
            )
            raise ValueError(message)
        if not self._available:
            return
        step = int(entry["iteration"])
        summary = self._summary
        if summary is None:
            log_dir = self._log_dir or _path_str(out_dir, "out_dir", "TensorBoardWriter")
            summary = self._summary = self._summary_class(log_dir=log_dir or None, **self._kwds)
        stats = self._stats
        for key, value in entry.items():
            if stats is not None and key not in stats:
                continue
            scalar = _scalar(value)
            if scalar is not None:
                summary.add_scalar(str(key), scalar, step)

    def finalize(self) -> None:
        """Flush and close the event file (a later call opens a new one)."""
        summary, self._summary = self._summary, None
        if summary is not None:
            summary.close()
