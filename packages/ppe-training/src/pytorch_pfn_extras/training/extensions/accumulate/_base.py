"""The machinery shared by the accumulate extensions.

Each accumulate extension is called every iteration (its class trigger is
``(1, 'iteration')``) with :data:`~pytorch_pfn_extras.training.extension.PRIORITY_EDITOR`:
it runs after the values of the iteration were reported (by the training step and by the
writer-priority extensions such as evaluators) and before the readers (``LogReport``,
``PrintReport``), so the accumulated value it reports is logged in the same iteration. The
``trigger`` given to the constructor is a separate interval trigger that decides when the
result is reported and the accumulation restarts: give it to the constructor, not to
``manager.extend(..., trigger=...)``, which would make the extension skip iterations.

Values stay where they are: tensors are combined with tensor operations (no ``.item()``,
hence no device synchronization, per iteration); Python numbers are combined as floats.

With ``distributed=True`` each process accumulates its own values, and when the reporting
trigger fires the partial results of all the ranks of the default process group are merged
(one collective, tensors through the CPU), so every rank reports the result over all the values
of all the ranks.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.distributed._collective import all_gather, partial_state_is_mine, rank
from pytorch_pfn_extras.training._extension import PRIORITY_EDITOR, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

Number = float | torch.Tensor
"""A value being accumulated: a float or a (detached, floating-point) tensor."""


def _check_key_pair(name: str, conversion_key_pair: Any) -> tuple[str, str]:
    if (
        not isinstance(conversion_key_pair, (tuple, list))
        or len(conversion_key_pair) != 2
        or not all(isinstance(key, str) and key for key in conversion_key_pair)
    ):
        message = (
            f"{name}: conversion_key_pair must be a pair of non-empty strings "
            f"(source key, destination key), got {conversion_key_pair!r}"
        )
        raise ValueError(message)
    return conversion_key_pair[0], conversion_key_pair[1]


def _as_number(name: str, key: str, value: Any) -> Number:
    """A reported value as a float or a detached floating-point tensor."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        return tensor if tensor.is_floating_point() else tensor.to(torch.get_default_dtype())
    try:
        return float(value)
    except (TypeError, ValueError):
        message = (
            f"{name}: the value reported under {key!r} must be a number or a tensor, "
            f"got {type(value).__name__}: {value!r}"
        )
        raise TypeError(message) from None


def _extremum(a: Number, b: Number, *, largest: bool) -> Number:
    """The larger (or smaller) of ``a`` and ``b``, element-wise; NaN propagates like NumPy."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        like = a if isinstance(a, torch.Tensor) else b
        assert isinstance(like, torch.Tensor)
        ta = torch.as_tensor(a, dtype=like.dtype, device=like.device)
        tb = torch.as_tensor(b, dtype=like.dtype, device=like.device)
        return torch.maximum(ta, tb) if largest else torch.minimum(ta, tb)
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b) if largest else min(a, b)


def _sqrt(value: Number) -> Number:
    return torch.sqrt(value) if isinstance(value, torch.Tensor) else math.sqrt(value)


class AccumulateBase(Extension, abc.ABC):
    """Base class of the accumulate extensions (see the module docstring).

    A subclass says how its state starts (:meth:`_initial`), how a value is folded in
    (:meth:`_update`), how the states of two sets of values combine (:meth:`_merge`, for
    ``distributed``) and what the result is (:meth:`_compute`). The state is a dict of
    floats, tensors or ``None`` (saved as is in snapshots); the number of values folded in
    is kept by this class.

    Args:
        conversion_key_pair: ``(source, destination)``: the value reported under ``source``
            in each iteration is accumulated; the result is reported under ``destination``.
        trigger: When to report the result and restart; each epoch by default.
        distributed: Combine the accumulations of all the processes of the default process
            group when reporting (a collective: every rank needs the extension, with the
            same trigger). In a snapshot written by one rank and loaded by all, the partial
            interval is that rank's: the others restart theirs empty, so that no value
            counts twice.

    Raises:
        ValueError: ``conversion_key_pair`` is not a pair of non-empty strings.
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_EDITOR

    def __init__(
        self,
        conversion_key_pair: tuple[str, str],
        trigger: TriggerLike = (1, "epoch"),
        distributed: bool = False,
    ) -> None:
        name = type(self).__name__
        self._source, self._destination = _check_key_pair(name, conversion_key_pair)
        self._distributed = bool(distributed)
        self._report_trigger = get_trigger(trigger)
        self._count = 0
        self._state = self._initial()

    @abc.abstractmethod
    def _initial(self) -> dict[str, Number | None]:
        """The state before any value was accumulated."""

    @abc.abstractmethod
    def _update(self, state: dict[str, Any], value: Number, count: int) -> None:
        """Fold ``value`` into ``state`` in place; ``count`` includes ``value``."""

    @abc.abstractmethod
    def _merge(
        self, state: dict[str, Any], count: int, other: dict[str, Any], other_count: int
    ) -> dict[str, Any]:
        """The state of the values of ``state`` and of ``other`` together (counts >= 1)."""

    @abc.abstractmethod
    def _compute(self, state: dict[str, Any], count: int) -> Number:
        """The result of ``count`` (at least one) accumulated values."""

    def _gathered(self) -> tuple[dict[str, Any], int]:
        """The state and count over all ranks (a collective)."""
        name = type(self).__name__
        local = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in self._state.items()}
        state, count = self._initial(), 0
        for other, other_count in all_gather((local, self._count), name):
            if other_count:
                state = self._merge(state, count, other, other_count) if count else other
                count += other_count
        like = next((v for v in self._state.values() if isinstance(v, torch.Tensor)), None)
        if like is not None:  # back to this rank's device
            state = {
                k: v.to(like.device) if isinstance(v, torch.Tensor) else v for k, v in state.items()
            }
        return state, count

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Accumulate this iteration's value; report the result when the trigger fires.

        An iteration that did not report the source key adds nothing; an interval in which
        it was never reported reports nothing.
        """
        observation = manager.observation
        if self._source in observation:
            value = _as_number(type(self).__name__, self._source, observation[self._source])
            self._count += 1
            self._update(self._state, value, self._count)
        if self._report_trigger(manager):
            state, count = self._gathered() if self._distributed else (self._state, self._count)
            if count:
                result = self._compute(state, count)
                manager.reporter.report({self._destination: result})
            self._count = 0
            self._state = self._initial()

    def state_dict(self) -> dict[str, Any]:
        """Return the partial accumulation and the state of the reporting trigger (and,
        with ``distributed``, the rank whose partial accumulation it is)."""
        state = {
            "count": self._count,
            "state": dict(self._state),
            "trigger": self._report_trigger.state_dict(),
        }
        if self._distributed:
            state["rank"] = rank()
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        self._report_trigger.load_state_dict(to_load.get("trigger", {}))
        if self._distributed and not partial_state_is_mine(to_load):
            self._count, self._state = 0, self._initial()
            return
        self._count = int(to_load["count"])
        self._state = {**self._initial(), **to_load["state"]}


class ExtremumAccumulate(AccumulateBase):
    """Shared by the max and min accumulations: keeps the extremum seen so far."""

    largest: bool = True

    def _initial(self) -> dict[str, Number | None]:
        return {"value": None}

    def _update(self, state: dict[str, Any], value: Number, count: int) -> None:
        current = state["value"]
        state["value"] = (
            value if current is None else _extremum(current, value, largest=self.largest)
        )

    def _merge(
        self, state: dict[str, Any], count: int, other: dict[str, Any], other_count: int
    ) -> dict[str, Any]:
        return {"value": _extremum(state["value"], other["value"], largest=self.largest)}

    def _compute(self, state: dict[str, Any], count: int) -> Number:
        result: Number = state["value"]
        return result


class MomentsAccumulate(AccumulateBase):
    """Shared by the standard deviations: Welford's running mean and sum of squared deviations.

    The result is ``sqrt(m2 / (count - ddof))``, NaN when ``count <= ddof`` (as NumPy).
    """

    ddof: int = 0

    def _initial(self) -> dict[str, Number | None]:
        return {"mean": 0.0, "m2": 0.0}

    def _update(self, state: dict[str, Any], value: Number, count: int) -> None:
        delta = value - state["mean"]
        state["mean"] = state["mean"] + delta / count
        state["m2"] = state["m2"] + delta * (value - state["mean"])

    def _merge(
        self, state: dict[str, Any], count: int, other: dict[str, Any], other_count: int
    ) -> dict[str, Any]:
        # Chan et al.'s pairwise combination of means and sums of squared deviations.
        total = count + other_count
        delta = other["mean"] - state["mean"]
        return {
            "mean": state["mean"] + delta * (other_count / total),
            "m2": state["m2"] + other["m2"] + delta * delta * (count * other_count / total),
        }

    def _compute(self, state: dict[str, Any], count: int) -> Number:
        m2: Number = state["m2"]
        denominator = count - self.ddof
        return _sqrt(m2 / denominator) if denominator > 0 else m2 * math.nan
