"""TabularDataset: the abstract interface, modes, slicing, data access and errors."""

from __future__ import annotations

import doctest
from typing import Any

import numpy as np
import pytest
import torch

import pytorch_pfn_extras.dataset
from pytorch_pfn_extras import dataset
from pytorch_pfn_extras.dataset import TabularDataset, tabular


class MyDataset(dataset.TabularDataset):
    """The example of the reference documentation, counting its reads."""

    def __init__(self) -> None:
        self.calls = 0

    def __len__(self) -> int:
        return 4

    @property
    def keys(self) -> tuple[str, ...]:
        return ("a", "b", "c")

    @property
    def mode(self) -> Any:
        return tuple

    def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
        self.calls += 1
        data = np.arange(12).reshape((4, 3))
        if indices is not None:
            data = data[indices]
        if key_indices is not None:
            data = data[:, list(key_indices)]
        return tuple(data.transpose())


def plain(value: Any) -> Any:
    """Examples with NumPy scalars -> Python values, for comparisons."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


def test_reference_documentation_example() -> None:
    ds = MyDataset()
    assert len(ds) == 4
    assert ds.keys == ("a", "b", "c")
    assert plain(ds.astuple()[0]) == (0, 1, 2)
    assert sorted(plain(ds.asdict()[0]).items()) == [("a", 0), ("b", 1), ("c", 2)]
    view = ds.slice[[3, 2], ("c", 0)]
    assert len(view) == 2
    assert view.keys == ("c", "a")
    assert plain(view.astuple()[1]) == (8, 6)
    assert sorted(plain(view.asdict()[1]).items()) == [("a", 6), ("c", 8)]


@pytest.mark.skipif(np.__version__ < "2", reason="docstrings show NumPy 2 scalar reprs")
@pytest.mark.parametrize(
    "obj",
    [
        TabularDataset,
        TabularDataset.transform,
        TabularDataset.transform_batch,
        tabular.from_data,
        tabular.DelegateDataset,
    ],
    ids=["TabularDataset", "transform", "transform_batch", "from_data", "DelegateDataset"],
)
def test_docstring_examples_run(obj: Any) -> None:
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(obj, globs={"np": np}):
        runner.run(test)
    assert runner.failures == 0
    assert runner.tries > 0


def test_subclass_must_implement_the_interface() -> None:
    class Incomplete(TabularDataset):
        def __len__(self) -> int:
            return 0

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_is_a_torch_dataset_and_the_namespace_exports_it() -> None:
    assert issubclass(TabularDataset, torch.utils.data.Dataset)
    assert pytorch_pfn_extras.dataset.TabularDataset is TabularDataset
    assert pytorch_pfn_extras.dataset.tabular.from_data is tabular.from_data
    assert isinstance(pytorch_pfn_extras.dataset.__version__, str)


def table() -> TabularDataset:
    return tabular.from_data({"a": np.arange(5), "b": np.arange(5) * 10, "c": list("vwxyz")})


def test_modes_shape_examples_and_fetched_data() -> None:
    ds = table()
    assert ds.mode is dict
    assert plain(ds[1]) == {"a": 1, "b": 10, "c": "w"}
    as_tuple = ds.astuple()
    assert as_tuple.mode is tuple
    assert plain(as_tuple[1]) == (1, 10, "w")
    a, _, c = as_tuple.fetch()
    assert a.tolist() == [0, 1, 2, 3, 4]
    assert c == list("vwxyz")
    unary = ds.slice[:, "b"]
    assert unary.mode is None
    assert plain(unary[2]) == 20
    assert unary.fetch().tolist() == [0, 10, 20, 30, 40]
    assert plain(unary.astuple()[2]) == (20,)
    assert plain(unary.asdict()[2]) == {"b": 20}
    # A unary view sliced with a tuple of keys becomes a tuple view (even over a dict table).
    assert unary.slice[:, ("b",)].mode is tuple
    assert ds.slice[:, ("b",)].mode is dict
    assert unary.slice[1:3].mode is None


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (slice(None), [0, 1, 2, 3, 4]),
        (slice(1, 4), [1, 2, 3]),
        (slice(None, None, -2), [4, 2, 0]),
        (slice(-2, None), [3, 4]),
        (slice(10, 20), []),
        ([4, 0, 0, -1], [4, 0, 0, 4]),
        ([], []),
        (np.array([2, -5]), [2, 0]),
        (np.array([1, 3], dtype=np.uint8), [1, 3]),
        (torch.tensor([3, 1]), [3, 1]),
        ([True, False, True, False, True], [0, 2, 4]),
        (np.array([False] * 5), []),
        (torch.tensor([False, True, False, False, True]), [1, 4]),
        (range(3, 0, -1), [3, 2, 1]),
    ],
)
def test_slice_rows_accepts_numpy_style_indices(rows: Any, expected: list[int]) -> None:
    view = table().slice[rows]
    assert len(view) == len(expected)
    assert view.fetch()["a"].tolist() == expected
    assert [plain(e)["a"] for e in view] == expected


@pytest.mark.parametrize(
    ("keys", "expected_keys", "mode"),
    [
        ("c", ("c",), None),
        (1, ("b",), None),
        (-1, ("c",), None),
        (("c", 0), ("c", "a"), dict),
        (["b"], ("b",), dict),
        ([True, False, True], ("a", "c"), dict),
        (np.array([0, 2]), ("a", "c"), dict),
    ],
)
def test_slice_keys_by_name_position_or_mask(
    keys: Any, expected_keys: tuple[str, ...], mode: Any
) -> None:
    view = table().slice[1:3, keys]
    assert view.keys == expected_keys
    assert view.mode is mode


def test_slicing_copies_the_index_array() -> None:
    rows = np.array([0, 1])
    view = table().slice[rows]
    rows[:] = 4
    assert view.fetch()["a"].tolist() == [0, 1]


@pytest.mark.parametrize(
    ("rows", "error", "message"),
    [
        ([5], IndexError, "row index 5 is out of range for a dataset of 5 rows"),
        (np.array([0, -6]), IndexError, "row index -6 is out of range for a dataset of 5 rows"),
        ([True, False], ValueError, "boolean mask has 2 entries but the dataset has 5 rows"),
        ([0.5, 1.0], TypeError, "must be integers or booleans, got float64"),
        ([[0, 1]], ValueError, r"one-dimensional, got an array of shape \(1, 2\)"),
        (3, TypeError, "got the int 3; use dataset\\[3\\]"),
        (slice(None, None, 0), ValueError, "slice step cannot be zero"),
        (object(), TypeError, "a boolean mask, got object <object object"),
        ([1, "a"], TypeError, "must be integers or booleans, got <U21 values"),
    ],
)
def test_bad_row_indices_are_reported_with_the_value(
    rows: Any, error: type[Exception], message: str
) -> None:
    ds = table()
    with pytest.raises(error, match=message):
        ds.slice[rows]
    with pytest.raises(error, match=message):
        ds.get_examples(rows, None)


@pytest.mark.parametrize(
    ("keys", "error", "message"),
    [
        ("z", KeyError, "unknown key 'z'; the dataset has keys \\('a', 'b', 'c'\\)"),
        (3, IndexError, "key index 3 is out of range for a dataset with keys"),
        (("a", -4), IndexError, "key index -4 is out of range"),
        (("a", 0), ValueError, "keys must be unique, got \\('a', 0\\)"),
        ([True, False], ValueError, "key mask has 2 entries but the dataset has 3 keys"),
        (
            (1.5,),
            TypeError,
            "a key must be a name \\(str\\) or a position \\(int\\), got float 1.5",
        ),
        ({"a"}, TypeError, "keys must be a key name, a key position"),
    ],
)
def test_bad_keys_are_reported_with_the_value(
    keys: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        table().slice[:, keys]


def test_slice_takes_at_most_rows_and_keys() -> None:
    with pytest.raises(IndexError, match="slice takes \\[rows\\] or \\[rows, keys\\], got 3"):
        table().slice[0:1, "a", "b"]


@pytest.mark.parametrize(
    ("index", "error"), [(5, IndexError), (-6, IndexError), (1.0, TypeError), (True, TypeError)]
)
def test_get_example_checks_the_index(index: Any, error: type[Exception]) -> None:
    with pytest.raises(
        error, match=repr(index) if error is TypeError else f"index {index} is out of range"
    ):
        table().get_example(index)


def test_indexing_and_iteration() -> None:
    ds = table().astuple()
    assert plain(ds[-1]) == (4, 40, "z")
    assert plain(ds[np.int64(2)]) == (2, 20, "x")
    assert plain(ds[1:3]) == [(1, 10, "w"), (2, 20, "x")]
    assert plain(ds[[4, 0]]) == [(4, 40, "z"), (0, 0, "v")]
    assert plain(ds[np.array([False, True, False, False, False])]) == [(1, 10, "w")]
    assert plain(list(ds)) == [(i, 10 * i, c) for i, c in enumerate("vwxyz")]


def _same(got: Any, expected: Any) -> bool:
    """Equal, and of the same types all the way down (a 0-d tensor is compared by value)."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, (tuple, list)):
        return len(got) == len(expected) and all(map(_same, got, expected))
    if isinstance(expected, dict):
        return list(got) == list(expected) and all(map(_same, got.values(), expected.values()))
    if isinstance(expected, torch.Tensor):
        return bool(torch.equal(got, expected))
    if isinstance(expected, np.ndarray):
        return bool(np.array_equal(got, expected))
    return bool(got == expected)


COLUMN_KINDS = {
    "list": lambda values: list(values),
    "ndarray": lambda values: np.array(values, dtype=np.int32),
    "tensor": lambda values: torch.tensor(values),
}


@pytest.mark.parametrize("mode", ["tuple", "dict", "unary"])
@pytest.mark.parametrize("kind", list(COLUMN_KINDS))
def test_every_read_arranges_examples_as_the_mode_says(mode: str, kind: str) -> None:
    a, b = COLUMN_KINDS[kind]([0, 1, 2]), COLUMN_KINDS[kind]([10, 11, 12])
    table = tabular.from_data({"a": a, "b": b})
    ds = {"tuple": table.astuple(), "dict": table.asdict(), "unary": table.slice[:, "b"]}[mode]
    examples = {
        "tuple": [(a[i], b[i]) for i in range(3)],
        "dict": [{"a": a[i], "b": b[i]} for i in range(3)],
        "unary": [b[i] for i in range(3)],
    }[mode]
    columns = {"tuple": (a, b), "dict": {"a": a, "b": b}, "unary": b}[mode]
    reads = {
        "ds[i]": [ds[i] for i in range(3)],
        "get_example": [ds.get_example(i) for i in range(3)],
        "iteration": list(ds),
        "ds[:]": list(ds[:]),
        "ds[rows]": list(ds[[0, 1, 2]]),
        "__getitems__": list(ds.__getitems__([0, 1, 2])),
    }
    for name, got in reads.items():
        assert _same(got, examples), name
    assert _same(ds.fetch(), columns)


def test_iteration_reads_in_chunks_not_rows() -> None:
    class Counting(TabularDataset):
        calls = 0

        def __len__(self) -> int:
            return 2500

        @property
        def keys(self) -> tuple[str, ...]:
            return ("v",)

        @property
        def mode(self) -> Any:
            return None

        def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
            self.calls += 1
            return (np.arange(2500)[indices],)

    ds = Counting()
    assert [int(v) for v in ds] == list(range(2500))
    assert ds.calls == 3


def test_public_get_examples_of_views_validates_and_composes() -> None:
    view = table().slice[::-1]
    a, c = view.get_examples([0, -1], (0, 2))
    assert a.tolist() == [4, 0]
    assert c == ["z", "v"]
    (b,) = view.get_examples(slice(1, 3), ("b",))
    assert b.tolist() == [30, 20]


def test_fetch_convert_and_with_converter() -> None:
    ds = tabular.from_data((("a", [1, 2]), ("t", torch.tensor([3, 4]))))
    a, t = ds.convert(ds.fetch())
    assert isinstance(a, np.ndarray)
    assert a.tolist() == [1, 2]
    assert isinstance(t, torch.Tensor)
    assert ds.asdict().convert(ds.asdict().fetch())["a"].tolist() == [1, 2]
    assert ds.slice[:, "a"].convert([5]).tolist() == [5]

    converted = ds.with_converter(lambda a, t: {"sum": np.asarray(a) + t.numpy()})
    assert converted.convert(converted.fetch())["sum"].tolist() == [4, 6]
    by_name = ds.asdict().with_converter(lambda a, t: len(a) + len(t))
    assert by_name.convert(by_name.fetch()) == 4
    unary = ds.slice[:, "a"].with_converter(lambda a: sum(a))
    assert unary.convert(unary.fetch()) == 3
    # The converter survives slicing; concat and join use the first dataset's.
    assert converted.slice[1:].convert(converted.slice[1:].fetch())["sum"].tolist() == [6]
    assert converted.concat(ds).convert(ds.fetch())["sum"].tolist() == [4, 6]
    other = tabular.from_data(("z", [0, 0]))
    joined = converted.join(other)
    assert joined.convert(ds.fetch())["sum"].tolist() == [4, 6]
    with pytest.raises(TypeError, match="converter must be callable, got int 3"):
        ds.with_converter(3)  # type: ignore[arg-type]


def test_user_get_examples_with_wrong_output_is_reported() -> None:
    class Broken(MyDataset):
        def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
            columns = super().get_examples(indices, key_indices)
            return columns[:2] if indices is None else tuple(c[:1] for c in columns)

    ds = Broken()
    with pytest.raises(ValueError, match=r"Broken\.get_examples must return a tuple of 3 columns"):
        ds.fetch()
    with pytest.raises(ValueError, match="returned 1 rows for column 'a', expected 2"):
        ds.slice[[0, 1]].fetch()


def test_works_with_torch_dataloader_fetching_each_batch_in_one_call() -> None:
    ds = MyDataset()
    loader = torch.utils.data.DataLoader(ds.astuple(), batch_size=3)
    batches = list(loader)
    assert ds.calls == 2
    assert [b.tolist() for b in batches[0]] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert [b.tolist() for b in batches[1]] == [[9], [10], [11]]


def test_repr_names_rows_and_keys() -> None:
    assert repr(table().slice[:2, "a"]) == "<View rows=2 keys=('a',)>"
