"""concat, join, transform and transform_batch: results, modes and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.dataset import TabularDataset, tabular


def plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim > 0:
        return value.tolist()
    return value.item() if hasattr(value, "item") else value


def numbers(n: int, start: int = 0) -> TabularDataset:
    return tabular.from_data(
        (("a", np.arange(start, start + n)), ("b", np.arange(start, start + n) * 10))
    )


# ---------------------------------------------------------------------------------------- concat


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (np.arange, np.ndarray),
        (torch.arange, torch.Tensor),
        (lambda n: list(range(n)), list),
    ],
)
def test_concat_stacks_rows_in_lists_and_one_part_keeps_its_type(make: Any, kind: type) -> None:
    first = tabular.from_data(("v", make(3)))
    second = tabular.from_data(("v", make(2)))
    both = first.concat(second, first)
    column = both.fetch()
    assert isinstance(column, list)  # rows of several parts: PPE's list
    assert isinstance(both.slice[3:5].fetch(), kind)  # rows of one part: as the part gives them
    assert plain(list(column)) == [0, 1, 2, 0, 1, 0, 1, 2]
    assert plain(both[3]) == 0
    assert plain(both.slice[[7, 0, 4]].fetch()) == [2, 0, 1]


def test_concat_of_mixed_column_types_gives_a_list() -> None:
    both = tabular.from_data(("v", np.arange(2))).concat(tabular.from_data(("v", ["x"])))
    assert plain(both.fetch()) == [0, 1, "x"]


def test_concat_mode_and_converter_come_from_the_first_dataset() -> None:
    first = numbers(2).asdict()
    second = numbers(3, start=5)
    both = first.concat(second)
    assert both.mode is dict
    assert len(both) == 5
    assert plain(both[4]) == {"a": 7, "b": 70}
    assert plain(both.concat(both)[9]) == {"a": 7, "b": 70}


def test_concat_with_different_keys_names_them() -> None:
    message = (
        r"cannot concat datasets with different keys: dataset 0 has keys \('a', 'b'\) but "
        r"dataset 2 has \('a',\)"
    )
    with pytest.raises(ValueError, match=message):
        numbers(2).concat(numbers(1), numbers(3).slice[:, ("a",)])


def test_concat_rejects_non_tables() -> None:
    with pytest.raises(TypeError, match="concat takes TabularDatasets, got list at position 1"):
        numbers(2).concat([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ join


def test_join_places_columns_side_by_side() -> None:
    joined = numbers(3).join(tabular.from_data({"c": ["x", "y", "z"]}))
    assert joined.keys == ("a", "b", "c")
    assert joined.mode is tuple
    assert plain(joined[2]) == (2, 20, "z")
    assert plain(joined.slice[::-1, ("c", "a")].fetch()) == (["z", "y", "x"], [2, 1, 0])


@pytest.mark.parametrize(
    ("modes", "expected"),
    [((None, None), tuple), ((None, dict), dict), ((dict, tuple), dict), ((tuple, dict), tuple)],
)
def test_join_mode_is_the_first_non_unary_mode(modes: tuple[Any, Any], expected: Any) -> None:
    def make(key: str, mode: Any) -> TabularDataset:
        ds = tabular.from_data((key, np.arange(3)))
        return ds if mode is None else (ds.astuple() if mode is tuple else ds.asdict())

    assert make("x", modes[0]).join(make("y", modes[1])).mode is expected


def test_join_with_mismatched_lengths_names_them() -> None:
    with pytest.raises(ValueError, match="dataset 0 has 3 rows but dataset 1 has 4"):
        numbers(3).join(tabular.from_data({"c": np.arange(4)}))


def test_join_with_a_repeated_key_names_it() -> None:
    with pytest.raises(ValueError, match="sharing key 'b' \\(in dataset 0 and dataset 1\\)"):
        numbers(3).join(tabular.from_data({"b": np.arange(3)}))


# ------------------------------------------------------------------------------------- transform


def test_transform_receives_positional_values_for_tuple_and_unary_tables() -> None:
    seen: list[Any] = []

    def f(a: Any, b: Any) -> tuple[Any, Any]:
        seen.append((plain(a), plain(b)))
        return a + b, a * b

    out = numbers(3).transform(("s", "p"), f)
    assert out.keys == ("s", "p")
    assert plain(out[2]) == (22, 40)
    assert out.mode is tuple
    assert seen == [(2, 20)]
    unary = numbers(3).slice[:, "a"].transform("neg", lambda a: -a)
    assert unary.mode is None
    assert plain(unary.fetch()) == [0, -1, -2]


def test_transform_receives_keywords_for_dict_tables_and_may_return_dicts() -> None:
    out = numbers(3).asdict().transform(("y", "x"), lambda b, a: {"x": a, "y": b})
    assert out.mode is dict
    assert plain(out[1]) == {"y": 10, "x": 1}
    assert plain(out.slice[:, "x"].fetch()) == [0, 1, 2]


def test_transform_is_lazy_and_applies_only_to_requested_rows() -> None:
    calls: list[int] = []

    def f(a: Any, b: Any) -> tuple[Any]:
        calls.append(int(a))
        return (a,)

    out = numbers(100).transform(("a",), f)
    assert calls == []
    assert plain(out.slice[[5, 7]].fetch()) == ([5, 7],)
    assert calls == [5, 7]


@pytest.mark.parametrize(
    ("keys", "function", "error", "message"),
    [
        (
            ("x", "y"),
            lambda a, b: (a,),
            ValueError,
            r"transform must return 2 values for keys \('x', 'y'\), got a tuple of 1",
        ),
        (
            ("x", "y"),
            lambda a, b: {"x": a, "z": b},
            ValueError,
            r"must return a dict with keys \('x', 'y'\), got keys \('x', 'z'\)",
        ),
        (
            ("x", "y"),
            lambda a, b: a,
            TypeError,
            r"must return a tuple or a dict for keys \('x', 'y'\), got int64 ",
        ),
        (
            ("x", 1),
            lambda a, b: (a, b),
            TypeError,
            r"keys must be a str or a tuple of str, got \('x', 1\)",
        ),
        (("x", "x"), lambda a, b: (a, b), ValueError, r"keys must be unique, got \('x', 'x'\)"),
        (
            ("x",),
            5,
            TypeError,
            r"transform takes a list of \(\(input_keys, output_keys\), function\) pairs, or a "
            r"callable, got int 5",
        ),
    ],
)
def test_transform_errors_name_the_offending_value(
    keys: Any, function: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        numbers(2).transform(keys, function).fetch()


def test_transform_must_keep_its_return_type() -> None:
    out = numbers(3).transform(("x",), lambda a, b: (a,) if a < 2 else {"x": a})
    with pytest.raises(
        ValueError,
        match="transform must always return the same type: it returned a tuple before but now dict",
    ):
        out.fetch()


# ------------------------------------------------------------------------------- transform_batch


def test_transform_batch_is_called_once_per_fetch_with_whole_columns() -> None:
    calls: list[int] = []

    def f(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> tuple[Any, Any]:
        calls.append(len(a))
        return a + b, np.stack([a, b], axis=1)

    out = numbers(6).slice[1::2].transform_batch(("s", "pair"), f)
    s, pair = out.fetch()
    assert calls == [3]
    assert s.tolist() == [11, 33, 55]
    assert pair.tolist() == [[1, 10], [3, 30], [5, 50]]
    assert plain(out[0]) == (11, [1, 10])


def test_transform_batch_dict_and_unary_outputs() -> None:
    as_dict = numbers(3).asdict().transform_batch(("d",), lambda a, b: {"d": b - a})
    assert as_dict.mode is dict
    assert as_dict.fetch()["d"].tolist() == [0, 9, 18]
    unary = numbers(3).transform_batch("t", lambda a, b: torch.as_tensor(a) * 2)
    assert unary.mode is None
    assert unary.fetch().tolist() == [0, 2, 4]


@pytest.mark.parametrize(
    ("keys", "function", "error", "message"),
    [
        (
            "x",
            lambda a, b: a[:-1],
            ValueError,
            "transform_batch must not change the number of rows: key 'x' has 3 rows, expected 4",
        ),
        (
            ("x", "y"),
            lambda a, b: (a, np.concatenate([b, b])),
            ValueError,
            "key 'y' has 8 rows, expected 4",
        ),
        (
            "x",
            lambda a, b: 3,
            TypeError,
            "must return columns with one entry per row, got int 3 for key 'x'",
        ),
        (
            ("x", "y"),
            lambda a, b: [a, b],
            TypeError,
            r"transform_batch must return a tuple or a dict for keys \('x', 'y'\), got list",
        ),
        (
            ("x", "y"),
            lambda a, b: {"x": a},
            ValueError,
            r"must return a dict with keys \('x', 'y'\), got keys \('x',\)",
        ),
    ],
)
def test_transform_batch_errors_name_the_offending_value(
    keys: Any, function: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        numbers(4).transform_batch(keys, function).fetch()


def test_transform_over_an_empty_table_defaults_to_tuple_mode() -> None:
    out = numbers(0).transform(("x",), lambda a, b: {"x": a})
    assert out.mode is tuple
    assert out.fetch() == ([],)
