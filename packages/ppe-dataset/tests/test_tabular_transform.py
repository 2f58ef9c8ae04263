"""PPE 0.9 transforms: ``transform(keys, [((input_keys, output_keys), fn), ...])`` and the same
for ``transform_batch``, written as PPE user code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pytorch_pfn_extras.dataset import TabularDataset, tabular


class Source(TabularDataset):
    """A user table with columns a, b, c (``a[i] = i``, ``b[i] = 10 * i``, ``c[i] = 100 * i``)."""

    def __init__(self, n: int = 4, mode: Any = tuple) -> None:
        self._n = n
        self._mode = mode
        self.calls: list[tuple[Any, Any]] = []

    def __len__(self) -> int:
        return self._n

    @property
    def keys(self) -> tuple[str, ...]:
        return ("a", "b", "c")

    @property
    def mode(self) -> Any:
        return self._mode

    def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
        self.calls.append((indices, key_indices))
        rows = range(self._n) if indices is None else indices
        if isinstance(rows, slice):
            rows = range(self._n)[rows]
        keys = range(3) if key_indices is None else key_indices
        return tuple(np.array([10**k * i for i in rows]) for k in keys)


def test_each_function_receives_only_its_inputs_positionally_in_tuple_mode() -> None:
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def total(a: Any, c: Any) -> Any:
        seen.append(("total", (int(a), int(c))))
        return a + c

    def swap(b: Any) -> tuple[Any, Any]:
        seen.append(("swap", (int(b),)))
        return -b, b * 2

    out = Source().transform(
        ("neg", "total", "double"),
        [((("a", "c"), "total"), total), ((("b",), ("neg", "double")), swap)],
    )
    assert out.keys == ("neg", "total", "double")
    assert out[2] == (-20, 202, 40)
    assert out.mode is tuple
    assert sorted(seen) == [("swap", (20,)), ("total", (2, 200))]
    neg, total_column, double = out.fetch()
    assert (neg, total_column, double) == ([0, -10, -20, -30], [0, 101, 202, 303], [0, 20, 40, 60])


def test_functions_receive_keywords_in_dict_mode_and_may_return_dicts() -> None:
    out = Source(mode=dict).transform(
        ("x", "y"),
        [((("c", "a"), ("y", "x")), lambda *, a, c: {"x": a + 1, "y": c - 1})],
    )
    assert out.mode is dict
    assert out[3] == {"x": 4, "y": 299}
    assert out.fetch() == {"x": [1, 2, 3, 4], "y": [-1, 99, 199, 299]}


@pytest.mark.parametrize(
    ("output_keys", "function", "mode", "example"),
    [
        ("x", lambda a: a * 3, None, 6),
        (("x",), lambda a: a * 3, None, 6),
        (("x",), lambda a: (a * 3,), tuple, (6,)),
        (("x",), lambda a: {"x": a * 3}, dict, {"x": 6}),
    ],
    ids=["str-key", "one-key-value", "tuple", "dict"],
)
def test_one_output_may_be_a_single_value_and_the_mode_follows_the_return_type(
    output_keys: Any, function: Any, mode: Any, example: Any
) -> None:
    out = Source().transform(("x",), [((("a",), output_keys), function)])
    assert out.mode is mode
    assert out[2] == example


def test_single_values_of_several_keys_give_a_tuple_table_and_str_keys_a_unary_one() -> None:
    two = Source().transform(("x", "y"), [(("a", "x"), lambda a: -a), (("b", "y"), lambda b: b)])
    assert two.mode is tuple
    assert two[1] == (-1, 10)
    unary = Source().transform("x", [(("a", "x"), lambda a: -a)])
    assert unary.mode is None
    assert unary.fetch() == [0, -1, -2, -3]


def test_reading_some_keys_runs_only_their_functions_and_reads_only_their_inputs() -> None:
    ran: list[str] = []

    def named(name: str, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            ran.append(name)
            return function(*args)

        return wrapper

    source = Source()
    out = source.transform(
        ("s", "p", "q"),
        [
            ((("a", "b"), "s"), named("s", lambda a, b: a + b)),
            ((("c",), ("p", "q")), named("pq", lambda c: (c + 1, c + 2))),
        ],
    )
    assert source.calls == []
    assert out.slice[[3, 1], "q"].fetch() == [302, 102]
    assert ran == ["pq", "pq"]
    assert source.calls == [([3, 1], (2,))]
    ran.clear()
    source.calls.clear()
    assert out.slice[:, ("s",)].fetch() == ([0, 11, 22, 33],)
    assert ran == ["s"] * 4
    assert source.calls == [(slice(None), (0, 1))]


def test_transform_batch_calls_each_needed_function_once_with_whole_columns() -> None:
    calls: list[tuple[str, int]] = []

    def scale(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> Any:
        calls.append(("scale", len(a)))
        return {"sa": a * 2, "sb": b * 2}

    def shift(c: np.ndarray[Any, Any]) -> Any:
        calls.append(("shift", len(c)))
        return c + 1

    source = Source(n=6)
    out = source.transform_batch(
        ("sa", "sb", "shifted"),
        [((("a", "b"), ("sa", "sb")), scale), ((("c",), "shifted"), shift)],
    )
    fetched = out.slice[1::2].fetch()
    assert out.mode is dict
    assert sorted(calls) == [("scale", 3), ("shift", 3)]
    assert fetched["sa"].tolist() == [2, 6, 10]
    assert fetched["sb"].tolist() == [20, 60, 100]
    assert fetched["shifted"].tolist() == [101, 301, 501]
    calls.clear()
    source.calls.clear()
    assert out.slice[:, "shifted"].fetch().tolist() == [1, 101, 201, 301, 401, 501]
    assert calls == [("shift", 6)]
    assert source.calls == [(slice(None), (2,))]


def test_transform_batch_in_dict_mode_receives_keyword_columns() -> None:
    table = tabular.from_data({"x": np.arange(4.0), "y": np.ones(4)})
    out = table.transform_batch(("ratio",), [((("y", "x"), ("ratio",)), lambda y, x: (x / y,))])
    assert out.mode is tuple
    assert out.fetch()[0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_bare_callable_stays_a_shorthand_for_one_function_of_every_column() -> None:
    out = Source().transform(("s",), lambda a, b, c: (a + b + c,))
    assert out.fetch() == ([0, 111, 222, 333],)
    batch = Source().transform_batch("s", lambda a, b, c: a + b + c)
    assert batch.fetch().tolist() == [0, 111, 222, 333]


def test_transforms_chain_and_compose_with_views() -> None:
    first = Source().transform(
        ("x", "y"), [((("a",), "x"), lambda a: a + 1), ((("b",), "y"), lambda b: b + 1)]
    )
    second = first.slice[::-1].transform_batch(
        ("z",), [((("y", "x"), "z"), lambda y, x: np.asarray(y) * np.asarray(x))]
    )
    assert second.fetch().tolist() == [31 * 4, 21 * 3, 11 * 2, 1 * 1]


@pytest.mark.parametrize(
    ("keys", "transforms", "message"),
    [
        (
            ("x", "y"),
            [((("a",), ("x", "y")), lambda a: (a, a)), ((("b",), "y"), lambda b: b)],
            r"transform outputs must be disjoint: key 'y' is produced by transform function 0 "
            r"and by transform function 1",
        ),
        (
            ("x", "y"),
            [((("a",), "x"), lambda a: a)],
            r"transform outputs must be exactly the keys \('x', 'y'\): no function produces "
            r"\('y',\); not among the keys: \(\)",
        ),
        (
            ("x",),
            [((("a",), ("x", "z")), lambda a: (a, a))],
            r"no function produces \(\); not among the keys: \('z',\)",
        ),
        (
            ("x",),
            [((("a", "nope"), "x"), lambda a, nope: a)],
            r"input key 'nope' of transform function 0 is not a key of the dataset; it has keys "
            r"\('a', 'b', 'c'\)",
        ),
        (("x",), [((("a",), ()), lambda a: ())], "output keys of transform function 0 must not"),
    ],
    ids=["overlap", "missing", "extra", "unknown-input", "no-output"],
)
def test_bad_transform_lists_raise_value_error_naming_the_keys(
    keys: Any, transforms: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Source().transform(keys, transforms)
    with pytest.raises(ValueError, match=message.replace("transform ", "transform_batch ")):
        Source().transform_batch(keys, transforms)


@pytest.mark.parametrize(
    ("transforms", "message"),
    [
        ("not a list", "transform takes a list of .* or a callable, got str 'not a list'"),
        ([(("a", "x"),)], r"item 0 is not such a pair: \(\('a', 'x'\),\)"),
        ([((("a",), "x"), 3)], r"item 0 is not such a pair"),
        ([(((1,), "x"), abs)], r"input keys of transform function 0 must be a str or a tuple"),
    ],
)
def test_malformed_transform_lists_raise_type_error(transforms: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Source().transform(("x",), transforms)


@pytest.mark.parametrize(
    ("transforms", "error", "message"),
    [
        (
            [((("a",), ("x", "y")), lambda a: (a,))],
            ValueError,
            r"transform function 0 must return 2 values for keys \('x', 'y'\), got a tuple of 1",
        ),
        (
            [((("a",), ("x", "y")), lambda a: {"x": a})],
            ValueError,
            r"transform function 0 must return a dict with keys \('x', 'y'\), got keys \('x',\)",
        ),
        (
            [((("a",), ("x", "y")), lambda a: a)],
            TypeError,
            r"transform function 0 must return a tuple or a dict for keys \('x', 'y'\), got int64",
        ),
        (
            [((("a",), "x"), lambda a: (a,)), ((("b",), ("y",)), lambda b: (b,))],
            None,
            None,
        ),
        (
            [((("a",), ("x",)), lambda a: (a,)), ((("b",), ("y",)), lambda b: {"y": b})],
            ValueError,
            "transform functions must all return tuples or all return dicts: transform function "
            "0 returned a tuple but transform function 1 returned dict",
        ),
        (
            [((("a",), ("x", "y")), lambda a: (a, a) if a < 2 else {"x": a, "y": a})],
            ValueError,
            "transform function 0 must always return the same type: it returned a tuple before "
            "but now dict",
        ),
    ],
    ids=["too-few", "wrong-dict", "not-a-tuple", "bare-str-output-ok", "mixed", "changing"],
)
def test_bad_function_outputs_are_reported_with_the_function_and_value(
    transforms: Any, error: type[Exception] | None, message: str | None
) -> None:
    keys = tuple(
        key for (_, out), _ in transforms for key in ((out,) if isinstance(out, str) else out)
    )
    out = Source().transform(keys, transforms)
    if error is None:
        assert out.fetch() == ([(0,), (1,), (2,), (3,)], [0, 10, 20, 30])
        return
    with pytest.raises(error, match=message):
        out.fetch()


def test_transform_batch_outputs_must_keep_the_number_of_rows() -> None:
    out = Source().transform_batch(("x",), [((("a",), "x"), lambda a: a[:-1])])
    with pytest.raises(
        ValueError,
        match="transform_batch function 0 must not change the number of rows: key 'x' has 3 "
        "rows, expected 4",
    ):
        out.fetch()


def test_mode_of_an_empty_transformed_table_is_known_without_calling_functions() -> None:
    empty = Source(n=0)
    assert empty.transform(("x",), [((("a",), "x"), abs)]).mode is None
    assert empty.transform(("x",), [((("a",), ("x",)), abs)]).mode is tuple
    assert empty.calls == []
