"""tabular.from_data and DelegateDataset."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.dataset import TabularDataset, tabular


def test_a_list_or_array_gives_a_unary_dataset() -> None:
    ds = tabular.from_data([0, 1, 2])
    assert ds.mode is None
    assert len(ds.keys) == 1
    assert ds[2] == 2
    array = tabular.from_data(np.arange(4.0))
    assert array.fetch().tolist() == [0.0, 1.0, 2.0, 3.0]
    tensor = tabular.from_data(torch.arange(3))
    assert isinstance(tensor.fetch(), torch.Tensor)
    assert tensor[-1].item() == 2


def test_named_unary_column_and_callable() -> None:
    named = tabular.from_data(("a", np.arange(3)))
    assert named.keys == ("a",)
    assert named.mode is None
    squares = tabular.from_data(("sq", lambda i: i * i), size=10)
    assert squares.keys == ("sq",)
    assert squares[5] == 25
    assert squares.slice[::3].fetch() == [0, 9, 36, 81]


def test_callables_receive_python_int_indices_lazily() -> None:
    seen: list[Any] = []

    def get(i: int) -> int:
        seen.append(i)
        return -i

    ds = tabular.from_data((("a", np.arange(6)), ("neg", get)))
    assert seen == []
    assert ds.slice[[4, 1], "neg"].fetch() == [-4, -1]
    assert seen == [4, 1]
    assert all(type(i) is int for i in seen)


def test_tuple_data_gives_a_tuple_dataset_in_key_order() -> None:
    ds = tabular.from_data(
        (
            ("a", np.arange(3)),
            ("b", lambda i: f"b{i}"),
            ("c", [5, 6, 7]),
            (("d", "e"), lambda i: {"d": i, "e": -i}),
        )
    )
    assert ds.keys == ("a", "b", "c", "d", "e")
    assert ds.mode is tuple
    assert ds[1] == (1, "b1", 6, 1, -1)
    unnamed = tabular.from_data((np.arange(2), [3, 4]))
    assert unnamed.mode is tuple
    assert len(set(unnamed.keys)) == 2
    assert unnamed[1] == (1, 4)


def test_dict_data_gives_a_dict_dataset() -> None:
    ds = tabular.from_data({"a": [0, 1, 2], "b": [3, 4, 5], ("c", "d"): lambda i: (i, i + 1)})
    assert ds.mode is dict
    assert ds[0] == {"a": 0, "b": 3, "c": 0, "d": 1}


def test_multi_key_callable_alone_keeps_its_return_mode() -> None:
    ds = tabular.from_data((("d", "e"), lambda i: {"d": i, "e": 2 * i}), size=3)
    assert ds.keys == ("d", "e")
    assert ds.fetch() == {"d": [0, 1, 2], "e": [0, 2, 4]}


def test_size_is_checked_against_columns() -> None:
    assert len(tabular.from_data(("a", [1, 2]), size=2)) == 2
    with pytest.raises(ValueError, match="column 'a' has 2 rows but size gives 3"):
        tabular.from_data(("a", [1, 2]), size=3)


@pytest.mark.parametrize(
    ("data", "size", "error", "message"),
    [
        (
            (("a", [1, 2]), ("b", [1, 2, 3])),
            None,
            ValueError,
            "column 'b' has 3 rows but column 'a' gives 2",
        ),
        (("a", lambda i: i), None, ValueError, "size must be given when data has only callables"),
        (("a", lambda i: i), -1, ValueError, "size must be a non-negative int, got -1"),
        ((("a", [1]), ("a", [2])), None, ValueError, "key 'a' appears more than once"),
        (
            {"a": "text"},
            None,
            TypeError,
            "column 'a' must be a list, a numpy.ndarray, a torch.Tensor or a callable, got str",
        ),
        (
            {("a", "b"): [1, 2]},
            None,
            TypeError,
            r"a list/array column takes one key \(a str\), got \('a', 'b'\)",
        ),
        ({1: [1, 2]}, None, TypeError, "keys must be str, got int 1"),
        (
            3,
            None,
            TypeError,
            "from_data takes a list/array, a \\(key, data\\) pair, a tuple or a dict, got int 3",
        ),
        ((), None, ValueError, "from_data needs at least one column"),
        (
            ("a", np.array(3)),
            None,
            ValueError,
            "column 'a' must have one entry per row, got a 0-d array",
        ),
    ],
)
def test_bad_data_is_reported_with_the_value(
    data: Any, size: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        tabular.from_data(data, size=size)


class MyDataset(tabular.DelegateDataset):
    def __init__(self) -> None:
        super().__init__(
            tabular.from_data(
                (
                    ("a", np.arange(10)),
                    ("b", self.get_b),
                    ("c", [3, 1, 4, 5, 9, 2, 6, 8, 7, 0]),
                    (("d", "e"), self.get_de),
                )
            )
        )

    def get_b(self, i: int) -> str:
        return f"b[{i}]"

    def get_de(self, i: int) -> dict[str, str]:
        return {"d": f"d[{i}]", "e": f"e[{i}]"}


def test_delegate_dataset_forwards_the_table_interface() -> None:
    ds = MyDataset()
    assert isinstance(ds, TabularDataset)
    assert len(ds) == 10
    assert ds.keys == ("a", "b", "c", "d", "e")
    assert ds.mode is tuple
    assert ds[0] == (0, "b[0]", 3, "d[0]", "e[0]")
    assert ds.slice[[9], ("c", "e")].fetch() == ([0], ["e[9]"])
    a, b = ds.get_examples([1, -1], (0, 1))
    assert a.tolist() == [1, 9]
    assert b == ["b[1]", "b[9]"]
    assert ds.with_converter(lambda *columns: len(columns)).convert(ds.fetch()) == 5
    assert isinstance(ds.convert(ds.fetch())[1], np.ndarray)


def test_delegate_subclass_overriding_get_examples_is_honoured() -> None:
    class Doubled(tabular.DelegateDataset):
        def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
            return tuple(c * 2 for c in super().get_examples(indices, key_indices))

    ds = Doubled(tabular.from_data(("v", np.arange(4))))
    assert ds.slice[1:3].fetch().tolist() == [2, 4]
    assert ds[3] == 6


def test_delegate_dataset_needs_a_table() -> None:
    with pytest.raises(TypeError, match="DelegateDataset wraps a TabularDataset, got list"):
        tabular.DelegateDataset([1, 2])  # type: ignore[arg-type]


def square(i: int) -> int:
    return i * i


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (square, ""),
        ((np.arange(3), square), " at position 1"),
        ((("a", np.arange(3)), square), " at position 1"),
    ],
    ids=["alone", "in-a-tuple", "after-a-keyed-column"],
)
@pytest.mark.parametrize("size", [None, 3])
def test_a_callable_without_a_key_raises_value_error(data: Any, where: str, size: Any) -> None:
    message = f"from_data needs a key for the callable <function square at 0x[0-9a-f]+>{where}"
    with pytest.raises(ValueError, match=message):
        tabular.from_data(data, size=size)
    assert tabular.from_data(("sq", square), size=3).fetch() == [0, 1, 4]


def test_ppe_module_paths_keep_tabular_from_data_the_function() -> None:
    # Importing a submodule binds it on its package: it must not hide the function.
    module = importlib.import_module("pytorch_pfn_extras.dataset.tabular.from_data")
    assert tabular.from_data is module.from_data
    assert len(tabular.from_data({"x": np.arange(3)})) == 3
    delegate_dataset = importlib.import_module(
        "pytorch_pfn_extras.dataset.tabular.delegate_dataset"
    )
    assert delegate_dataset.DelegateDataset is tabular.DelegateDataset
    tabular_dataset = importlib.import_module("pytorch_pfn_extras.dataset.tabular.tabular_dataset")
    assert tabular_dataset.TabularDataset is TabularDataset
