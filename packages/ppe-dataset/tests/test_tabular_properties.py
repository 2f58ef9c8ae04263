"""Property-based test: random chains of table operations agree with the same work on NumPy arrays.

Each example builds a random source table (array, list, tensor or user-defined columns), applies a
random chain of slice / astuple / asdict / concat / join / transform / transform_batch, and
checks every way of reading the result (fetch, get_example, indexing, iteration, get_examples,
a last slice) against a NumPy reference that performs the same operations eagerly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras.dataset import TabularDataset, tabular


class UserTable(TabularDataset):
    """A user-defined table; checks PPE's contract: rows are None, a slice or a list of ints."""

    def __init__(self, columns: dict[str, np.ndarray[Any, Any]]) -> None:
        self._names = tuple(columns)
        self._columns = list(columns.values())

    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def keys(self) -> tuple[str, ...]:
        return self._names

    @property
    def mode(self) -> type[tuple[Any, ...]]:
        return tuple

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        assert indices is None or isinstance(indices, (slice, list)), type(indices)
        assert not isinstance(indices, list) or all(type(i) is int for i in indices)
        assert key_indices is None or (
            isinstance(key_indices, tuple) and all(type(k) is int for k in key_indices)
        )
        columns = self._columns if key_indices is None else [self._columns[k] for k in key_indices]
        return tuple(c if indices is None else c[indices] for c in columns)


@dataclass
class Reference:
    keys: list[str]
    columns: dict[str, np.ndarray[Any, Any]]
    mode: Any

    @property
    def length(self) -> int:
        return len(self.columns[self.keys[0]])

    def row(self, i: int) -> Any:
        values = [int(self.columns[k][i]) for k in self.keys]
        if self.mode is tuple:
            return tuple(values)
        if self.mode is dict:
            return dict(zip(self.keys, values))
        return values[0]


@dataclass
class Names:
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def fresh(self) -> str:
        return f"k{next(self.counter)}"


def as_ints(column: Any) -> list[int]:
    if isinstance(column, torch.Tensor):
        return [int(v) for v in column.tolist()]
    return [int(v) for v in column]


def as_plain(example: Any) -> Any:
    if isinstance(example, tuple):
        return tuple(int(v) for v in example)
    if isinstance(example, dict):
        return {k: int(v) for k, v in example.items()}
    return int(example)


def make_source(
    draw: st.DrawFn, names: Names, keys: list[str], length: int, kind: str | None = None
):
    values = {k: np.arange(length, dtype=np.int64) * 17 + next(names.counter) * 1000 for k in keys}
    kind = kind or draw(st.sampled_from(["array", "list", "tensor", "user", "mixed"]))
    if kind == "user":
        return UserTable(values), Reference(list(keys), values, tuple)
    converters = {
        "array": lambda v: v,
        "list": lambda v: v.tolist(),
        "tensor": lambda v: torch.from_numpy(v.copy()),
    }
    entries = []
    for key in keys:
        chosen = kind if kind != "mixed" else draw(st.sampled_from(sorted(converters)))
        entries.append((key, converters[chosen](values[key])))
    as_dict = draw(st.booleans())
    if as_dict:
        return tabular.from_data(dict(entries)), Reference(list(keys), values, dict)
    return tabular.from_data(tuple(entries)), Reference(list(keys), values, tuple)


def draw_rows(draw: st.DrawFn, length: int) -> Any:
    kind = draw(st.sampled_from(["slice", "list", "mask", "array"]))
    bound = length + 2
    if kind == "slice":
        start = draw(st.none() | st.integers(-bound, bound))
        stop = draw(st.none() | st.integers(-bound, bound))
        step = draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))
        return slice(start, stop, step)
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=length, max_size=length)), bool)
    if length == 0:
        return []
    items = draw(st.lists(st.integers(-length, length - 1), max_size=2 * length + 2))
    return items if kind == "list" else np.array(items, dtype=np.int64)


def draw_keys(draw: st.DrawFn, keys: list[str]) -> Any:
    kind = draw(st.sampled_from(["none", "single", "tuple", "list", "mask"]))
    if kind == "none":
        return None
    as_position = st.booleans()
    if kind == "single":
        i = draw(st.integers(0, len(keys) - 1))
        return draw(st.sampled_from([keys[i], i, i - len(keys)]))
    if kind == "mask":
        mask = draw(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)))
        return mask if any(mask) else [True] * len(keys)
    chosen = draw(st.permutations(range(len(keys))))[: draw(st.integers(1, len(keys)))]
    items = [i if draw(as_position) else keys[i] for i in chosen]
    return tuple(items) if kind == "tuple" else items


def resolve_keys(spec: Any, keys: list[str]) -> tuple[list[str], bool]:
    if isinstance(spec, (str, int)):
        return [keys[spec] if isinstance(spec, int) else spec], True
    if all(isinstance(k, bool) for k in spec):
        return [k for k, keep in zip(keys, spec) if keep], False
    return [keys[k] if isinstance(k, int) else k for k in spec], False


def apply_op(draw: st.DrawFn, op: str, ds: TabularDataset, ref: Reference, names: Names):
    if op == "slice":
        rows = draw_rows(draw, ref.length)
        keys_spec = draw_keys(draw, ref.keys)
        picked = np.arange(ref.length)[rows]
        if keys_spec is None:
            return ds.slice[rows], Reference(
                ref.keys, {k: ref.columns[k][picked] for k in ref.keys}, ref.mode
            )
        keys, unary = resolve_keys(keys_spec, ref.keys)
        mode = None if unary else (ref.mode or tuple)
        columns = {k: ref.columns[k][picked] for k in keys}
        return ds.slice[rows, keys_spec], Reference(keys, columns, mode)
    if op == "astuple":
        return ds.astuple(), Reference(ref.keys, ref.columns, tuple)
    if op == "asdict":
        return ds.asdict(), Reference(ref.keys, ref.columns, dict)
    if op == "concat":
        if draw(st.booleans()):
            other, other_ref = (
                ds.slice[::-1],
                Reference(ref.keys, {k: v[::-1] for k, v in ref.columns.items()}, ref.mode),
            )
        else:
            other, other_ref = make_source(draw, names, ref.keys, draw(st.integers(0, 6)))
        columns = {k: np.concatenate([ref.columns[k], other_ref.columns[k]]) for k in ref.keys}
        # The mode is the first non-empty table's (an empty transformed table cannot know it).
        mode = ref.mode if ref.length > 0 or other_ref.length == 0 else other_ref.mode
        return ds.concat(other), Reference(ref.keys, columns, mode)
    if op == "join":
        new_keys = [names.fresh() for _ in range(draw(st.integers(1, 2)))]
        other, other_ref = make_source(draw, names, new_keys, ref.length)
        if len(new_keys) == 1 and draw(st.booleans()):
            other, other_ref = other.slice[:, 0], Reference(new_keys, other_ref.columns, None)
        mode = ref.mode or other_ref.mode or tuple
        columns = {**ref.columns, **other_ref.columns}
        return ds.join(other), Reference(ref.keys + new_keys, columns, mode)
    # transform / transform_batch: new[i] = old[i] * 2 + 1 (per row) or old[i] * 3 - 1 (batch)
    batch = op == "transform_batch"
    in_keys = list(ref.keys)
    out_keys = [names.fresh() for _ in in_keys]
    unary = len(in_keys) == 1 and draw(st.booleans())
    out_mode = None if unary else draw(st.sampled_from([tuple, dict]))

    def function(*args: Any, **kwargs: Any) -> Any:
        values = list(args) if args else [kwargs[k] for k in in_keys]
        if batch:
            outs = [np.asarray(as_ints(v)) * 3 - 1 for v in values]
        else:
            outs = [int(v) * 2 + 1 for v in values]
        if unary:
            return outs[0]
        if out_mode is dict:
            return dict(zip(out_keys, outs))
        return tuple(outs)

    keys_arg = out_keys[0] if unary else tuple(out_keys)
    if draw(st.booleans()):  # PPE's form: one ((input_keys, output_keys), fn) pair per key
        transforms: Any = [
            pair(old, new, batch, out_mode, unary) for old, new in zip(in_keys, out_keys)
        ]
    else:  # our shorthand: one function of every column
        transforms = function
    apply = ds.transform_batch if batch else ds.transform
    view = apply(keys_arg, transforms)
    columns = {
        new: ref.columns[old] * 3 - 1 if batch else ref.columns[old] * 2 + 1
        for old, new in zip(in_keys, out_keys)
    }
    return view, Reference(out_keys, columns, out_mode)


def pair(old: str, new: str, batch: bool, out_mode: Any, unary: bool) -> Any:
    """``((old,), outputs), fn)`` computing ``new`` from ``old``, returning as ``out_mode`` asks."""

    def function(*args: Any, **kwargs: Any) -> Any:
        (value,) = args or (kwargs[old],)
        out = np.asarray(as_ints(value)) * 3 - 1 if batch else int(value) * 2 + 1
        if unary:
            return out
        return {new: out} if out_mode is dict else (out,)

    return ((old,), new if unary else (new,)), function


def check_against(ds: TabularDataset, ref: Reference, draw: st.DrawFn) -> None:
    assert len(ds) == ref.length
    assert ds.keys == tuple(ref.keys)
    fetched = ds.fetch()
    if ref.length == 0 and ds.mode is not ref.mode:
        # A transform over an empty table never runs, so its mode cannot be known: tuple.
        ref = Reference(ref.keys, ref.columns, ds.mode)
        fetched = ds.fetch()
    assert ds.mode is ref.mode
    if ref.mode is tuple:
        assert isinstance(fetched, tuple)
        assert [as_ints(c) for c in fetched] == [ref.columns[k].tolist() for k in ref.keys]
    elif ref.mode is dict:
        assert list(fetched) == ref.keys
        assert {k: as_ints(c) for k, c in fetched.items()} == {
            k: v.tolist() for k, v in ref.columns.items() if k in ref.keys
        }
    else:
        assert as_ints(fetched) == ref.columns[ref.keys[0]].tolist()
    expected = [ref.row(i) for i in range(ref.length)]
    assert [as_plain(ds.get_example(i)) for i in range(ref.length)] == expected
    assert [as_plain(ds[i - ref.length]) for i in range(ref.length)] == expected
    assert [as_plain(e) for e in ds] == expected
    assert [as_plain(e) for e in ds[::-1]] == expected[::-1]
    with pytest.raises(IndexError, match=f"index {ref.length} is out of range"):
        ds[ref.length]
    rows = draw_rows(draw, ref.length)
    picked = np.arange(ref.length)[rows].tolist()
    assert [as_plain(e) for e in ds[rows]] == [expected[i] for i in picked]
    key_indices = draw(st.permutations(range(len(ref.keys))))[: draw(st.integers(1, len(ref.keys)))]
    # a user's own table is called as PPE calls it (a slice or a list); views take any rows
    legal = rows if isinstance(rows, slice) or not isinstance(ds, UserTable) else picked
    columns = ds.get_examples(legal, tuple(key_indices))
    assert [as_ints(c) for c in columns] == [
        [int(ref.columns[ref.keys[k]][i]) for i in picked] for k in key_indices
    ]
    last = ds.slice[rows]
    assert [as_plain(e) for e in last] == [expected[i] for i in picked]


OPS = ["slice", "astuple", "asdict", "concat", "join", "transform", "transform_batch"]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_operation_chains_match_numpy_reference(data: st.DataObject) -> None:
    draw = data.draw
    names = Names()
    keys = [names.fresh() for _ in range(draw(st.integers(1, 4)))]
    ds, ref = make_source(draw, names, keys, draw(st.integers(0, 12)))
    for op in draw(st.lists(st.sampled_from(OPS), max_size=5)):
        ds, ref = apply_op(draw, op, ds, ref, names)
    check_against(ds, ref, draw)


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(0, 40),
    first=st.tuples(st.none() | st.integers(-45, 45), st.none() | st.integers(-45, 45)),
    steps=st.tuples(st.sampled_from([-3, -1, 1, 2]), st.sampled_from([-2, -1, 1, 3])),
    second=st.tuples(st.none() | st.integers(-45, 45), st.none() | st.integers(-45, 45)),
)
def test_slices_of_slices_match_numpy_and_stay_ranges(
    length: int, first: tuple[Any, Any], steps: tuple[int, int], second: tuple[Any, Any]
) -> None:
    values = np.arange(length) * 3
    outer = slice(first[0], first[1], steps[0])
    inner = slice(second[0], second[1], steps[1])
    view = tabular.from_data(values).slice[outer].slice[inner]
    assert view.fetch().tolist() == values[outer][inner].tolist()
    # A user-defined source sees one slice (not an index array) for a slice of a slice.
    source = UserTable({"v": values})
    seen: list[Any] = []
    original = source.get_examples

    def record(indices: Any, key_indices: Any) -> Any:
        seen.append(indices)
        return original(indices, key_indices)

    source.get_examples = record  # type: ignore[method-assign]
    assert as_ints(source.slice[outer].slice[inner].fetch()[0]) == values[outer][inner].tolist()
    assert len(seen) == 1
    assert seen[0] is None or isinstance(seen[0], slice)
