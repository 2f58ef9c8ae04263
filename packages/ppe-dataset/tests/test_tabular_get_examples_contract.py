"""What a user-defined ``get_examples`` receives: PPE 0.9's ``None`` / ``slice`` / ``list`` rows
and ``None`` / tuple-of-int keys, through views, concatenations, joins and transforms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.dataset import TabularDataset, tabular


class Recording(TabularDataset):
    """A PPE 0.9 style table over Python lists that branches on the type of ``indices``."""

    def __init__(self, n: int, keys: tuple[str, ...] = ("a", "b", "c"), offset: int = 0) -> None:
        self._n = n
        self._keys = keys
        self._data = [[offset + 100 * k + i for i in range(n)] for k in range(len(keys))]
        self.calls: list[tuple[Any, Any]] = []

    def __len__(self) -> int:
        return self._n

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Any:
        return tuple

    def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
        self.calls.append((indices, key_indices))
        if key_indices is None:
            key_indices = tuple(range(len(self._keys)))
        assert isinstance(key_indices, tuple)
        assert all(type(k) is int for k in key_indices)
        columns = [self._data[k] for k in key_indices]
        if indices is None:
            return tuple(columns)
        if isinstance(indices, slice):
            return tuple(column[indices] for column in columns)
        if isinstance(indices, list):
            assert all(type(i) is int for i in indices)
            return tuple([column[i] for i in indices] for column in columns)
        message = f"indices must be None, a slice or a list, got {type(indices).__name__}"
        raise TypeError(message)


def rows_of(indices: Any, n: int) -> list[int]:
    """The rows of a table of ``n`` rows that ``indices`` selects."""
    if indices is None:
        return list(range(n))
    if isinstance(indices, slice):
        return list(range(n)[indices])
    return list(indices)


@pytest.mark.parametrize(
    ("make_view", "expected"),
    [
        (lambda ds: ds.slice[2:18].slice[3:9], range(5, 11)),
        (lambda ds: ds.slice[::-1], range(19, -1, -1)),
        (lambda ds: ds.slice[1:17:3], range(1, 17, 3)),
        (lambda ds: ds.slice[::-1].slice[::3], range(19, -1, -3)),
        (lambda ds: ds.slice[15:2:-2].slice[1:4], range(13, 7, -2)),
        (lambda ds: ds.slice[3:].slice[::2].slice[::-1], range(19, 2, -2)),
        (lambda ds: ds.slice[5:5], range(0)),
    ],
    ids=[
        "slice-of-slice",
        "reversed",
        "stepped",
        "reversed-stepped",
        "negative-step",
        "three",
        "empty",
    ],
)
def test_slices_of_slices_reach_the_source_as_the_equivalent_slice(
    make_view: Any, expected: range
) -> None:
    source = Recording(20)
    a, _, _ = make_view(source).fetch()
    ((indices, key_indices),) = source.calls
    assert isinstance(indices, slice)
    assert key_indices is None
    assert rows_of(indices, 20) == list(expected)
    assert a == list(expected)


@pytest.mark.parametrize(
    ("request_rows", "expected"),
    [
        ([7, 2, 2], [7, 2, 2]),
        ([-1, 0], [19, 0]),
        (np.array([4, 5]), [4, 5]),
        (torch.tensor([9, 1]), [9, 1]),
        (np.arange(20) % 7 == 0, [0, 7, 14]),
    ],
    ids=["list", "negative", "array", "tensor", "mask"],
)
def test_a_requested_list_reaches_the_source_as_a_list_of_ints(
    request_rows: Any, expected: list[int]
) -> None:
    source = Recording(20)
    a, _, _ = source.slice[request_rows].fetch()
    assert a == expected
    assert source.calls == [(expected, None)]
    source.calls.clear()
    assert [example[0] for example in source[request_rows]] == expected
    assert source.calls == [(expected, None)]


def test_rows_of_a_slice_picked_by_a_list_reach_the_source_as_a_list() -> None:
    source = Recording(20)
    view = source.slice[1::2].slice[[3, 0]]
    assert view.fetch()[0] == [7, 1]
    assert source.calls == [([7, 1], None)]
    source.calls.clear()
    assert source.slice[[9, 4, 1]].slice[::-1].fetch()[0] == [1, 4, 9]
    assert source.calls == [([1, 4, 9], None)]


def test_whole_table_reads_are_none_and_examples_keep_their_values() -> None:
    source = Recording(4)
    assert source.fetch() == ([0, 1, 2, 3], [100, 101, 102, 103], [200, 201, 202, 203])
    assert source.calls == [(None, None)]
    assert source.astuple().asdict()[2] == {"a": 2, "b": 102, "c": 202}
    assert list(source.slice[::-1]) == [(3 - i, 103 - i, 203 - i) for i in range(4)]


def test_a_torch_dataloader_batch_reaches_the_source_as_a_list() -> None:
    source = Recording(6)
    loader = torch.utils.data.DataLoader(source, batch_size=4, sampler=[5, 0, 3, 1, 2, 4])
    batches = list(loader)
    assert [call[0] for call in source.calls] == [[5, 0, 3, 1], [2, 4]]
    assert batches[0][0].tolist() == [5, 0, 3, 1]


@pytest.mark.parametrize(
    ("view_rows", "request_rows", "rows_a", "rows_b"),
    [
        (slice(None), None, list(range(10)), list(range(10))),
        (slice(12, 16), slice(1, 3), None, [3, 4]),
        (slice(None, None, -1), None, list(range(9, -1, -1)), list(range(9, -1, -1))),
        (slice(3, 17, 4), None, [3, 7], [1, 5]),
        (slice(15, 2, -5), None, [5], [5, 0]),
    ],
    ids=["all", "second-part-only", "reversed", "stepped", "negative-step"],
)
def test_each_part_of_a_concat_asked_for_a_slice_gets_the_equivalent_slice(
    view_rows: slice, request_rows: Any, rows_a: Any, rows_b: Any
) -> None:
    a = Recording(10)
    b = Recording(10, offset=10)  # b's column "a" holds 10..19: one table 0..19
    view = a.concat(b).slice[view_rows]
    column = view.fetch()[0] if request_rows is None else view.slice[request_rows].fetch()[0]
    expected = list(range(20))[view_rows]
    if request_rows is not None:
        expected = expected[request_rows]
    assert list(column) == expected
    for part, rows in ((a, rows_a), (b, rows_b)):
        if rows is None:
            assert part.calls == []
            continue
        ((indices, _),) = part.calls
        assert isinstance(indices, slice)
        assert rows_of(indices, 10) == rows
    if rows_a == list(range(10)):
        assert a.calls == b.calls == [(slice(None), None)]


def test_a_view_of_keys_asks_its_source_for_every_row_as_slice_none() -> None:
    source = Recording(5)
    view = source.slice[:, ("c", "a")]
    c, a = view.fetch()
    assert (c, a) == ([200, 201, 202, 203, 204], [0, 1, 2, 3, 4])
    assert source.calls == [(slice(None), (2, 0))]
    source.calls.clear()
    source.slice[:, ("a", "b", "c")].fetch()
    assert source.calls == [(slice(None), (0, 1, 2))]
    source.calls.clear()
    assert source.slice[:, "b"].fetch() == [100, 101, 102, 103, 104]
    assert source.calls == [(slice(None), (1,))]


def test_a_join_asks_each_part_for_the_tuple_of_its_keys() -> None:
    left = Recording(4, ("a", "b", "c"))
    right = Recording(4, ("x",))
    joined = left.join(right)
    assert joined.fetch() == (
        [0, 1, 2, 3],
        [100, 101, 102, 103],
        [200, 201, 202, 203],
        [0, 1, 2, 3],
    )
    assert left.calls == [(None, (0, 1, 2))]
    assert right.calls == [(None, (0,))]
    left.calls.clear()
    right.calls.clear()
    assert joined.slice[[3, 1], ("x", "c")].fetch() == ([3, 1], [203, 201])
    assert left.calls == [([3, 1], (2,))]
    assert right.calls == [([3, 1], (0,))]


@pytest.mark.parametrize("request_rows", [slice(3, 3), slice(20, 30), [], np.zeros(20, bool)])
def test_an_empty_request_to_a_concat_calls_no_part(request_rows: Any) -> None:
    a = Recording(10)
    b = Recording(10, offset=10)
    both = a.concat(b)
    assert both.slice[request_rows].fetch() == ([], [], [])
    assert both.get_examples(request_rows, (1,)) == ([],)
    assert a.calls == b.calls == []


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (np.arange, np.ndarray),
        (torch.arange, torch.Tensor),
        (lambda n: list(range(n)), list),
    ],
    ids=["array", "tensor", "list"],
)
def test_concat_columns_are_lists_when_several_parts_contribute(make: Any, kind: type) -> None:
    first = tabular.from_data(("v", make(3)))
    second = tabular.from_data(("v", make(2)))
    both = first.concat(second)
    for column, expected in [
        (both.fetch(), [0, 1, 2, 0, 1]),
        (both.slice[1:4].fetch(), [1, 2, 0]),
        (both.slice[[4, 0, 3]].fetch(), [1, 0, 0]),
        (both.slice[::-1].fetch(), [1, 0, 2, 1, 0]),
    ]:
        assert type(column) is list
        assert [int(v) for v in column] == expected
    # Rows of one part come back as that part returns them.
    only_first = both.slice[0:2].fetch()
    assert isinstance(only_first, kind)
    assert [int(v) for v in only_first] == [0, 1]
    assert isinstance(both.slice[[4, 3]].fetch(), kind)


def test_concat_of_user_tables_returning_arrays_gives_lists() -> None:
    class Arrays(Recording):
        def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
            return tuple(np.asarray(c) for c in super().get_examples(indices, key_indices))

    both = Arrays(3).concat(Arrays(2, offset=50))
    a, _, _ = both.fetch()
    assert a == [0, 1, 2, 50, 51]
    assert isinstance(both.slice[:3].fetch()[0], np.ndarray)


def test_one_example_is_asked_as_a_list_of_one_row_through_any_view() -> None:
    a = Recording(10)
    b = Recording(10, offset=10)
    assert a[4] == (4, 104, 204)
    assert a.calls == [([4], None)]
    a.calls.clear()
    assert a.slice[::-3].get_example(1) == (6, 106, 206)
    assert a.calls == [([6], None)]
    a.calls.clear()
    both = a.concat(b)
    assert both[13] == (13, 113, 213)
    assert (a.calls, b.calls) == ([], [([3], None)])
    b.calls.clear()
    assert both.slice[[12, 2], ("c",)][1] == (202,)
    assert (a.calls, b.calls) == ([([2], (2,))], [])
    a.calls.clear()
    joined = a.join(Recording(10, ("x",)))
    assert joined.asdict()[-1] == {"a": 9, "b": 109, "c": 209, "x": 9}
    assert a.calls == [([9], (0, 1, 2))]


def test_iteration_asks_the_source_for_lists_of_rows() -> None:
    source = Recording(1500)
    examples = list(source.slice[::-1])
    assert examples[0] == (1499, 1599, 1699)
    assert examples[-1] == (0, 100, 200)
    assert [type(indices) for indices, _ in source.calls] == [list, list]
    assert source.calls[0][0][:3] == [1499, 1498, 1497]
    assert sum(len(indices) for indices, _ in source.calls) == 1500
