"""Integer arguments of ppe-dataset: Python and NumPy ints are accepted, bools are not."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.dataset import SharedDataset, tabular
from pytorch_pfn_extras.dataset._checks import is_integer


class Position:
    """An integral type that is neither ``int`` nor a NumPy integer (registered below)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


numbers.Integral.register(Position)


@pytest.mark.parametrize(
    "value", [0, -3, 2**70, np.int64(3), np.uint8(3), np.intp(-1), Position(2)]
)
def test_python_numpy_and_registered_integers_are_integers(value: object) -> None:
    assert is_integer(value)


@pytest.mark.parametrize(
    "value",
    [True, False, np.bool_(True), 3.0, np.float32(3), "3", None, np.array(3), torch.tensor(3)],
)
def test_bools_floats_arrays_and_tensors_are_not(value: object) -> None:
    assert not is_integer(value)


def _table() -> tabular.TabularDataset:
    return tabular.from_data({"a": np.arange(4) * 10, "b": np.arange(4)}).astuple()


USES: dict[str, tuple[Callable[[Any], Any], int, Any]] = {
    # name: (use of the integer, the integer, expected result)
    "row index": (lambda i: _table()[i], 2, (20, 2)),
    "get_example": (lambda i: _table().get_example(i), -1, (30, 3)),
    "key position": (lambda i: _table().slice[:, i].fetch().tolist(), 1, [0, 1, 2, 3]),
    "key positions": (lambda i: _table().slice[:, [i, 0]].keys, 1, ("b", "a")),
    "from_data size": (
        lambda i: tabular.from_data(("sq", lambda j: j * j), size=i).fetch(),
        3,
        [0, 1, 4],
    ),
    "cache index": (lambda i: SharedDataset((4, 2)).is_cached(i), 3, False),
    "cache size": (lambda i: len(SharedDataset((i, 3)).cache), 2, 2),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(USES))
@pytest.mark.parametrize("make", [int, np.int64, Position], ids=["int", "int64", "Integral"])
def test_integer_arguments_take_any_integer(name: str, make: Callable[[int], Any]) -> None:
    use, value, expected = USES[name]
    assert use(make(value)) == expected


@pytest.mark.parametrize("name", list(USES))
def test_integer_arguments_reject_a_bool(name: str) -> None:
    use = USES[name][0]
    with pytest.raises((TypeError, ValueError), match="True"):
        use(True)
