"""``interop.is_int``: the "an int, not a bool" check of ppe-core and the distributions built on it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.nn import Ensure, ExtendedSequential
from pytorch_pfn_extras.writing import ThreadQueueWriter


class Count(enum.IntEnum):
    TWO = 2


@pytest.mark.parametrize("value", [0, 3, -7, 2**70, Count.TWO])
def test_ints_and_int_subclasses_other_than_bool_are_ints(value: object) -> None:
    assert is_int(value)


@pytest.mark.parametrize(
    "value",
    [True, False, 3.0, "3", None, np.int64(3), np.bool_(True), torch.tensor(3), [3], (3,)],
)
def test_bools_floats_numpy_integers_and_tensors_are_not(value: object) -> None:
    assert not is_int(value)


def _repeat(n: Any) -> int:
    return len(ExtendedSequential(torch.nn.Linear(2, 2)).repeat(n))


def _max_pending(n: Any) -> int:
    return ThreadQueueWriter(max_pending=n).max_pending


def _ensure_dim(n: Any) -> int:
    Ensure(shape=(n,))(torch.zeros(2))
    return 2


@pytest.mark.parametrize(
    ("use", "error", "message"),
    [
        (_repeat, TypeError, "n_repeat must be an int, got True"),
        (_max_pending, TypeError, "max_pending must be an int >= 1, got True"),
        (
            _ensure_dim,
            ValueError,
            r"shape must hold non-negative ints or None, got True in \(True,\)",
        ),
    ],
)
def test_arguments_that_count_reject_a_bool_and_take_an_int_enum(
    use: Callable[[Any], int], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        use(True)
    assert use(Count.TWO) == 2
