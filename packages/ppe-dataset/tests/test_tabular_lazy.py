"""Laziness: composing views reads nothing; a fetch reads each source once, with composed indices."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytorch_pfn_extras.dataset import TabularDataset, tabular


class CountingTable(TabularDataset):
    """A user-defined, array-backed table that records every ``get_examples`` call."""

    def __init__(self, **columns: np.ndarray[Any, Any]) -> None:
        self._names = tuple(columns)
        self._columns = list(columns.values())
        self.calls: list[tuple[Any, Any]] = []

    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def keys(self) -> tuple[str, ...]:
        return self._names

    @property
    def mode(self) -> type[tuple[Any, ...]]:
        return tuple

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        self.calls.append((indices, key_indices))
        columns = self._columns if key_indices is None else [self._columns[k] for k in key_indices]
        return tuple(c if indices is None else c[indices] for c in columns)


def table(n: int, *names: str, seed: int = 0) -> CountingTable:
    rng = np.random.default_rng(seed)
    return CountingTable(**{name: rng.integers(0, 10**6, n) for name in names})


def test_composing_views_reads_no_data() -> None:
    a = table(100, "a", "b", "c")
    b = table(50, "x", "y", seed=1)
    c = table(30, "a", "b", "c", seed=2)
    view = (
        a.slice[::2, ("a", "b")]
        .transform_batch(("s", "d"), lambda a, b: (a + b, a - b))
        .join(b.slice[np.arange(50)[::-1]])
        .transform(("s", "d", "x", "y"), lambda s, d, x, y: (s, d, x, y))
        .slice[np.arange(50) % 3 == 0, ["x", "s"]]
        .with_converter(lambda x, s: (x, s))
        .asdict()
    )
    other = c.concat(c.slice[::-1]).slice[5:50].astuple()
    assert len(view) == 17
    assert view.keys == ("x", "s")
    assert len(other) == 45
    assert a.calls == b.calls == c.calls == []


def test_fetch_calls_each_source_once_with_composed_indices() -> None:
    n = 1000
    a = table(n, "a", "b", "c")
    rng = np.random.default_rng(3)
    first = rng.permutation(n)[:600]
    b = table(600, "x", "y", seed=4)
    second = rng.integers(-600, 600, 250)
    chain = (
        a.slice[first, ("a", "b")]
        .transform_batch(("s", "d"), lambda a, b: {"s": a + b, "d": a - b})
        .join(b)
        .slice[second, ("d", "y", "s")]
    )
    assert a.calls == b.calls == []

    fetched = chain.fetch()  # dict mode: the transform returns dicts
    assert list(fetched) == ["d", "y", "s"]
    d, y, s = fetched.values()

    ((a_indices, a_keys),) = a.calls
    ((b_indices, b_keys),) = b.calls
    composed = first[second % 600]
    np.testing.assert_array_equal(a_indices, composed)
    assert a_keys == (0, 1)
    np.testing.assert_array_equal(b_indices, second % 600)
    assert b_keys == (1,)
    ref_a, ref_b, _ = a._columns
    np.testing.assert_array_equal(d, ref_a[composed] - ref_b[composed])
    np.testing.assert_array_equal(s, ref_a[composed] + ref_b[composed])
    np.testing.assert_array_equal(y, b._columns[1][second % 600])
    assert all(isinstance(column, np.ndarray) for column in (d, y, s))
    assert chain.mode is dict  # known from the fetch: no further read
    assert len(a.calls) == 1


def test_slices_of_slices_reach_the_source_as_one_slice() -> None:
    a = table(1000, "a")
    view = a.slice[10:900:2].slice[5:300:3].slice[::-1]
    (column,) = view.fetch()
    ((indices, _),) = a.calls
    assert isinstance(indices, slice)
    reference = a._columns[0][10:900:2][5:300:3][::-1]
    np.testing.assert_array_equal(column, reference)
    assert np.shares_memory(column, a._columns[0])  # a view, no copy


def test_deep_slice_chains_compose_into_a_single_index() -> None:
    source = tabular.from_data({"v": np.arange(10_000)})
    view = source
    expected = np.arange(10_000)
    rng = np.random.default_rng(5)
    for _ in range(200):
        picked = rng.permutation(len(expected))[: max(1, len(expected) - 10)]
        view = view.slice[picked]
        expected = expected[picked]
    np.testing.assert_array_equal(view.fetch()["v"], expected)
    # The view keeps one index array, not one per level: its size is that of the rows it holds.
    assert view._rows.nbytes == len(expected) * np.dtype(np.intp).itemsize  # type: ignore[attr-defined]
    assert view._dataset is source  # type: ignore[attr-defined]


def test_concat_fetch_calls_each_part_once_and_keeps_order() -> None:
    a = table(40, "p", "q")
    b = table(25, "p", "q", seed=6)
    both = a.concat(b)
    order = np.random.default_rng(7).permutation(65)
    p, q = both.slice[order].fetch()
    assert len(q) == 65
    assert len(a.calls) == len(b.calls) == 1
    reference_p = np.concatenate([a._columns[0], b._columns[0]])[order]
    np.testing.assert_array_equal(p, reference_p)
    a.calls.clear()
    b.calls.clear()
    p, _ = both.slice[45:5:-3].fetch()
    np.testing.assert_array_equal(p, np.concatenate([a._columns[0], b._columns[0]])[45:5:-3])
    assert a.calls == [(slice(39, 3, -3), None)]
    assert b.calls == [(slice(5, None, -3), None)]


def test_only_parts_holding_requested_rows_are_read() -> None:
    a = table(10, "v")
    b = table(10, "v", seed=8)
    a.concat(b).slice[12:18].fetch()
    assert a.calls == []
    assert b.calls == [(slice(2, 8, 1), None)]


def test_join_reads_only_sources_of_requested_keys() -> None:
    a = table(10, "a")
    b = table(10, "b", seed=9)
    joined = a.join(b)
    joined.slice[:, "b"].fetch()
    assert a.calls == []
    assert len(b.calls) == 1


def test_transform_mode_probes_one_example_only_when_asked_before_any_fetch() -> None:
    a = table(10, "a")
    view = a.transform(("x", "y"), lambda a: {"x": a, "y": -a})
    assert view.mode is dict
    assert a.calls == [([0], None)]
    fetched = view.fetch()
    assert list(fetched) == ["x", "y"]
    assert len(a.calls) == 2


@pytest.mark.parametrize("rows", [slice(None), [3, 1], np.array([True] * 10)])
def test_array_backed_fetch_returns_arrays(rows: Any) -> None:
    data = tabular.from_data({"a": np.arange(10), "b": np.arange(10.0)})
    fetched = data.slice[rows].fetch()
    assert all(isinstance(column, np.ndarray) for column in fetched.values())
