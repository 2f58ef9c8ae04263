"""Online mean/std statistics that keep tensors on their device.

``Summary.add`` is on the training hot path (every iteration, every reported key), so values are
dispatched on their exact type through a dict, and a tensor costs one ``clone`` plus a list append:
pending tensors are folded into on-device accumulators in batches. The statistics of tensors are
tensors, computed on the device; only ``state_dict`` converts them to Python (one host transfer
per device).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import torch

from pytorch_pfn_extras.reporting._summary_values import (
    _ARRAY,
    _CALLABLE,
    _KINDS,
    _NUMBER,
    _OTHER,
    _TENSOR,
    _TUPLE,
    _check_weight,
    _classify,
    _describe,
    _DeviceTotals,
    _kind_of,
    _mean,
    _statistics,
    _sum_tensors,
    _to_host,
    _Totals,
)

Statistic: TypeAlias = float | torch.Tensor
"""A mean or standard deviation: a Python float, or a 0-d tensor when tensors were added."""

# Pending tensors are folded into the accumulators once this many have been added.
_FOLD_EVERY = 64


class Summary:
    """Online summarization of a sequence of scalars (weighted mean and standard deviation).

    Values may be Python numbers, NumPy scalars or 0-d arrays, 0-d tensors on any device, or
    zero-argument callables (evaluated when the summary is read). Tensors are accumulated on
    their device, and the statistics of a summary that received tensors are 0-d tensors on
    that device, computed there: nothing is copied to the host and the device is never
    synchronized, except by :meth:`state_dict`. The statistics of Python and NumPy numbers are
    Python floats.

    Example:
        >>> s = Summary()
        >>> s.add(1.0)
        >>> s.add(3.0)
        >>> s.make_statistics()
        (2.0, 1.0)
        >>> s.add(torch.tensor(5.0))
        >>> s.compute_mean()
        tensor(3.)
    """

    __slots__ = ("_buf", "_deferred", "_dtype", "_n", "_tn", "_tx", "_tx2", "_x", "_x2")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._x = 0.0  # host sums of Python/NumPy values and of Python weights
        self._x2 = 0.0
        self._n = 0.0
        self._tx: torch.Tensor | None = None  # device sums (float64, float32 on MPS)
        self._tx2: torch.Tensor | None = None
        self._tn: torch.Tensor | None = None  # device sum of tensor weights
        self._buf: list[torch.Tensor] = []  # unweighted tensors not folded yet
        self._deferred: list[tuple[Callable[[], Any], Any]] = []
        self._dtype: torch.dtype | None = None  # of the tensors added (folded), promoted

    def add(self, value: Any, weight: Any = 1) -> None:
        """Add a value.

        Args:
            value: A Python number, NumPy scalar or 0-d array, 0-d tensor, or a zero-argument
                callable returning one of these (called when the summary is read).
            weight: Weight of the value: a Python number, NumPy scalar or 0-d tensor.

        Raises:
            ValueError: ``value`` or ``weight`` is not a scalar.
        """
        if type(weight) is not int and type(weight) is not float:
            _check_weight(weight)
        if not self._add(value, weight, _kind_of(value)):
            message = (
                "Summary.add expects a scalar (number, 0-d tensor or array) or a callable, "
                f"got {_describe(value)}"
            )
            raise ValueError(message)

    def _add(self, value: Any, weight: Any, kind: int) -> bool:
        """Add ``value`` of the given kind (``weight`` already checked); False if not a scalar."""
        plain_weight = type(weight) is int or type(weight) is float
        if kind == _NUMBER:
            if plain_weight:
                self._add_number(float(value), weight)
            else:
                self._add_weighted(float(value), weight)
            return True
        if kind == _TENSOR:
            if value.dim() != 0:
                return False
            if value.requires_grad:
                value = value.detach()
            if plain_weight and weight == 1:
                # clone: the caller may modify its tensor in place before we fold it.
                buf = self._buf
                buf.append(value.clone())
                self._n += 1
                if len(buf) >= _FOLD_EVERY:
                    self._fold()
            else:
                self._add_weighted(value, weight)
            return True
        if kind == _ARRAY:
            if value.ndim != 0:
                return False
            item = value.item()
            item_kind = _kind_of(item)
            return item_kind == _NUMBER and self._add(item, weight, item_kind)
        if kind == _CALLABLE:
            self._deferred.append((value, weight))
            return True
        return False

    def _add_number(self, value: float, weight: float = 1.0) -> None:
        """Add the Python float ``value`` with a Python number ``weight`` to the host sums.

        The one place where the host sums grow: :meth:`add`, the number fast path of
        :meth:`DictSummary.add` and :meth:`DictSummary._add_float` (the TimeSummary's) all
        come here.
        """
        weighted = weight * value
        self._x += weighted
        self._x2 += weighted * value
        self._n += weight

    def _add_weighted(self, value: float | torch.Tensor, weight: Any) -> None:
        """Add ``value * weight`` for a tensor value or a non-``int``/``float`` weight."""
        if isinstance(value, torch.Tensor):
            self._note_dtype(value.dtype)
        if isinstance(weight, torch.Tensor):
            w = weight.detach()
            self._note_dtype(w.dtype)
            device = value.device if isinstance(value, torch.Tensor) else w.device
            tx, tx2 = self._accumulators(device)
            wv = w * value
            tx.add_(wv)
            if isinstance(value, torch.Tensor):
                tx2.addcmul_(wv, value)
            else:
                tx2.add_(wv, alpha=value)
            if self._tn is None:
                self._tn = torch.zeros((), dtype=tx.dtype, device=tx.device)
            self._tn.add_(w)
            return
        wf = float(weight.item() if isinstance(weight, (np.ndarray, np.generic)) else weight)
        if isinstance(value, torch.Tensor):
            tx, tx2 = self._accumulators(value.device)
            tx.add_(value, alpha=wf)
            tx2.addcmul_(value, value, value=wf)
            self._n += wf
        else:
            self._add_number(value, wf)

    def _note_dtype(self, dtype: torch.dtype) -> None:
        known = self._dtype
        self._dtype = dtype if known is None else torch.promote_types(known, dtype)

    def _accumulators(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._tx is None or self._tx2 is None:
            dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS: no float64
            self._tx = torch.zeros((), dtype=dtype, device=device)
            self._tx2 = torch.zeros((), dtype=dtype, device=device)
        return self._tx, self._tx2

    def _fold(self) -> None:
        """Reduce the pending tensors into the device accumulators (no host transfer)."""
        buf = self._buf
        if not buf:
            return
        self._buf = []
        try:
            stacked = torch.stack(buf)
        except RuntimeError:  # tensors on several devices: fold them one by one
            for t in buf:
                self._fold_stacked(t.reshape(1))
            return
        self._fold_stacked(stacked)

    def _fold_stacked(self, stacked: torch.Tensor) -> None:
        self._note_dtype(stacked.dtype)
        tx, tx2 = self._accumulators(stacked.device)
        stacked = stacked.to(device=tx.device, dtype=tx.dtype)
        tx.add_(stacked.sum())
        tx2.add_(torch.dot(stacked, stacked))

    def _materialize(self) -> None:
        """Evaluate deferred callables and fold pending tensors."""
        while self._deferred:
            deferred, self._deferred = self._deferred, []
            for fn, weight in deferred:
                value = fn()
                if not self._add(value, weight, _kind_of(value)):
                    message = (
                        f"a callable given to Summary returned a non-scalar: {_describe(value)}"
                    )
                    raise ValueError(message)
        self._fold()

    def _totals(self) -> _Totals | _DeviceTotals:
        """Evaluate what is pending and return the sums: tensors if tensors were added."""
        self._materialize()
        tx, tx2, tn = self._tx, self._tx2, self._tn
        if tx is None or tx2 is None:  # tensor weights create the accumulators too
            return _Totals(self._x, self._x2, self._n)
        n = self._n if tn is None else tn + self._n
        return _DeviceTotals(tx + self._x, tx2 + self._x2, n)

    def _result_dtype(self) -> torch.dtype:
        dtype = self._dtype
        if dtype is None or not dtype.is_floating_point:
            return torch.get_default_dtype()
        return dtype

    def compute_mean(self) -> Statistic:
        """Return the weighted mean of the added values.

        Returns:
            A 0-d tensor, on the device of the tensors added and of their (promoted) floating
            dtype, if any tensor was added; otherwise a Python float.

        Raises:
            ValueError: nothing was added, or only numbers whose weights sum to 0.
        """
        totals = self._totals()
        if isinstance(totals, _DeviceTotals):
            return (totals.x / totals.n).to(self._result_dtype())
        return _mean(totals.x, totals.n)

    def make_statistics(self) -> tuple[Statistic, Statistic]:
        """Return ``(mean, std)`` of the added values (population standard deviation).

        Returns:
            Two 0-d tensors if any tensor was added (see :meth:`compute_mean`); otherwise two
            Python floats.

        Raises:
            ValueError: nothing was added, or only numbers whose weights sum to 0.
        """
        totals = self._totals()
        if isinstance(totals, _DeviceTotals):
            mean = totals.x / totals.n
            std = (totals.x2 / totals.n - mean * mean).clamp_min(0).sqrt()
            dtype = self._result_dtype()
            return mean.to(dtype), std.to(dtype)
        return _statistics(totals)

    def state_dict(self) -> dict[str, float]:
        """Return the accumulated sums as Python floats (loadable on any device).

        This reads tensors on the host: it waits for their device.
        """
        (totals,) = _to_host([self._totals()])
        return totals.state()

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Replace the accumulated sums by those of ``to_load`` (from :meth:`state_dict`).

        The sums are loaded as Python floats: the statistics are floats until a tensor is added.

        Raises:
            KeyError: ``to_load`` lacks one of ``_x``, ``_x2``, ``_n``.
        """
        missing = [k for k in ("_x", "_x2", "_n") if k not in to_load]
        if missing:
            message = f"Summary state lacks {missing}; expected the keys '_x', '_x2' and '_n'"
            raise KeyError(message)
        self._reset()
        self._x = float(to_load["_x"])
        self._x2 = float(to_load["_x2"])
        self._n = float(to_load["_n"])

    def __add__(self, other: object) -> Summary:
        if not isinstance(other, Summary):
            return NotImplemented
        out = Summary()
        out._x = self._x + other._x
        out._x2 = self._x2 + other._x2
        out._n = self._n + other._n
        out._tx = _sum_tensors(self._tx, other._tx)
        out._tx2 = _sum_tensors(self._tx2, other._tx2)
        out._tn = _sum_tensors(self._tn, other._tn)
        out._buf = self._buf + other._buf  # pending tensors are never modified: share them
        out._deferred = self._deferred + other._deferred
        if self._dtype is not None:
            out._note_dtype(self._dtype)
        if other._dtype is not None:
            out._note_dtype(other._dtype)
        return out

    def __repr__(self) -> str:
        pending = len(self._buf) + len(self._deferred)
        return f"<Summary weight={self._n!r} pending={pending}>"


class DictSummary:
    """Online summarization of a sequence of dictionaries, one :class:`Summary` per key.

    :meth:`add` keeps scalars (numbers, 0-d tensors and arrays), zero-argument callables and
    ``(value, weight)`` tuples; other values (strings, images...) are skipped, because an
    observation may hold entries that are not meant to be averaged.

    The statistics of a key that received tensors are 0-d tensors on their device (no device
    synchronization); those of numbers are Python floats.

    Example:
        >>> s = DictSummary()
        >>> s.add({"loss": torch.tensor(1.0), "acc": (0.5, 10)})
        >>> s.add({"loss": torch.tensor(3.0), "acc": (1.0, 30)})
        >>> s.compute_mean()
        {'loss': tensor(2.), 'acc': 0.875}
    """

    __slots__ = ("_summaries",)

    def __init__(self) -> None:
        self._summaries: dict[str, Summary] = {}

    def add(self, d: Mapping[str, Any]) -> None:
        """Add a dictionary of values.

        Args:
            d: Maps names to values: scalars, callables, or ``(value, weight)`` tuples.

        Raises:
            ValueError: the weight of a ``(value, weight)`` tuple, or its value, is not a scalar.
        """
        summaries = self._summaries
        kinds = _KINDS
        for key, value in d.items():
            try:  # _kind_of(value), inlined: a call costs as much as the lookup
                kind = kinds[type(value)]
            except KeyError:
                kind = _classify(value)
            if kind == _NUMBER:  # the most common case: no weight to check, no dispatch
                try:
                    summary = summaries[key]
                except KeyError:
                    summary = summaries[key] = Summary()
                summary._add_number(float(value))
                continue
            if kind == _OTHER:
                continue
            weight: Any = 1
            pair = kind == _TUPLE
            if pair:
                if len(value) != 2:
                    continue
                value, weight = value
                if type(weight) is not int and type(weight) is not float:
                    _check_weight(weight, key)
                kind = _kind_of(value)
            known = summaries.get(key)
            summary = Summary() if known is None else known
            if summary._add(value, weight, kind):
                if known is None:  # a key is kept once it holds a value
                    summaries[key] = summary
            elif pair:
                message = (
                    f"the value of the {key!r} (value, weight) pair is not a scalar: "
                    f"{_describe(value)}"
                )
                raise ValueError(message)

    def _add_float(self, key: str, value: float) -> None:
        """Add one Python float (the TimeSummary's path: no dict, no dispatch)."""
        try:
            summary = self._summaries[key]
        except KeyError:
            summary = self._summaries[key] = Summary()
        summary._add_number(value)

    def compute_mean(self) -> dict[str, Statistic]:
        """Return the weighted mean of each key: a 0-d tensor for a key that received
        tensors, a Python float otherwise (see :meth:`Summary.compute_mean`)."""
        return {key: summary.compute_mean() for key, summary in self._summaries.items()}

    def make_statistics(self) -> dict[str, Statistic]:
        """Return the mean of each key, and its standard deviation under ``"<key>.std"``.

        Like :meth:`compute_mean`, tensors for the keys that received tensors.
        """
        stats: dict[str, Statistic] = {}
        for key, summary in self._summaries.items():
            stats[key], stats[key + ".std"] = summary.make_statistics()
        return stats

    def state_dict(self) -> dict[str, dict[str, float]]:
        """Return ``{key: Summary state}`` with Python floats (loadable on any device).

        This reads tensors on the host, with one transfer per device for all the keys.
        """
        summaries = self._summaries
        totals = _to_host([summary._totals() for summary in summaries.values()])
        return {key: total.state() for key, total in zip(summaries, totals)}

    def load_state_dict(self, to_load: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the content by that of ``to_load`` (from :meth:`state_dict`).

        Raises:
            KeyError: a per-key state lacks one of ``_x``, ``_x2``, ``_n``.
        """
        summaries: dict[str, Summary] = {}
        for key, sub in to_load.items():
            summary = Summary()
            summary.load_state_dict(sub)
            summaries[key] = summary
        self._summaries = summaries

    def __add__(self, other: object) -> DictSummary:
        if not isinstance(other, DictSummary):
            return NotImplemented
        out = DictSummary()
        merged = {key: s + Summary() for key, s in self._summaries.items()}
        for key, s in other._summaries.items():
            mine = merged.get(key)
            merged[key] = s + Summary() if mine is None else mine + s
        out._summaries = merged
        return out

    def __repr__(self) -> str:
        return f"<DictSummary keys={list(self._summaries)!r}>"
