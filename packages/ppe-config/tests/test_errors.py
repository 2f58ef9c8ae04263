"""Errors name the config path and the chain of references that led there."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytorch_pfn_extras.config import (
    CircularReferenceError,
    Config,
    ConfigAttributeError,
    ConfigError,
    ConfigIndexError,
    ConfigKeyError,
    ConfigTypeError,
    ConfigValueError,
)


class Net:
    def __init__(self, hidden: int) -> None:
        if hidden <= 0:
            message = f"hidden must be positive, got {hidden}"
            raise ValueError(message)
        self.hidden = hidden


TYPES: dict[str, Any] = {"Net": Net, "pair": lambda first, second: (first, second)}


@pytest.mark.parametrize(
    ("tree", "path", "error", "message", "where", "trace"),
    [
        pytest.param(
            {"model": {"type": "Nett", "hidden": 3}},
            "/model",
            ConfigKeyError,
            "/model: unknown type 'Nett' (did you mean 'Net'?); known types: 'Net', 'pair'",
            "/model",
            ("/model",),
            id="unknown-type",
        ),
        pytest.param(
            {"top": {"type": "pair", "first": "@/model", "second": 1}, "model": {"type": "Nett"}},
            "/top",
            ConfigKeyError,
            "/model: unknown type 'Nett' (did you mean 'Net'?); known types: 'Net', 'pair' "
            "(evaluation chain: /top -> /top/first -> /model)",
            "/model",
            ("/top", "/top/first", "/model"),
            id="unknown-type-via-reference",
        ),
        pytest.param(
            {"a": {"b": 1, "c": 2}},
            "/a/zz",
            ConfigKeyError,
            "config path '/a/zz' not found: /a has no key 'zz' (its keys: 'b', 'c')",
            "/a/zz",
            (),
            id="missing-key",
        ),
        pytest.param(
            {"l": [1, 2]},
            "/l/5",
            ConfigIndexError,
            "config path '/l/5' not found: /l is a list of 2 items, so '5' is not a valid "
            "index (expected an integer in [0, 2))",
            "/l/5",
            (),
            id="index-out-of-range",
        ),
        pytest.param(
            {"l": [1, 2]},
            "/l/first",
            ConfigTypeError,
            "config path '/l/first' not found: /l is a list of 2 items, so 'first' is not a "
            "valid index",
            "/l/first",
            (),
            id="index-not-an-integer",
        ),
        pytest.param(
            {"s": "text"},
            "/s/0",
            ConfigTypeError,
            "config path '/s/0' not found: /s is a str ('text'), not a dict or a list, so it has "
            "no item '0'",
            "/s/0",
            (),
            id="index-into-a-scalar",
        ),
        pytest.param(
            {"top": ["@/mid"], "mid": {"ref": "@../lr"}, "optimizer": {"lr": 1}},
            "/top",
            ConfigKeyError,
            "/mid/ref: reference '@../lr' not found: / has no key 'lr' (its keys: 'top', 'mid', "
            "'optimizer') (evaluation chain: /top -> /top/0 -> /mid -> /mid/ref)",
            "/mid/ref",
            ("/top", "/top/0", "/mid", "/mid/ref"),
            id="reference-to-a-missing-path",
        ),
        pytest.param(
            {"ref": "@../../x"},
            "/ref",
            ConfigKeyError,
            "/ref: invalid reference '@../../x': '..' climbs above the root",
            "/ref",
            ("/ref",),
            id="reference-above-the-root",
        ),
        pytest.param(
            {"net": {"type": "Net", "hidden": 2}, "width": "@/net.width"},
            "/width",
            ConfigTypeError,  # PPE 0.9: what ``net["width"]`` raises
            "/width: reference '@/net.width': the Net object at /net has no attribute 'width'",
            "/width",
            ("/width",),
            id="missing-attribute",
        ),
        pytest.param(
            {"net": {"type": "Net", "hidden": 2}, "x": "@/net.hidden", "y": "@/x/0"},
            "/y",
            ConfigKeyError,
            "/y: reference '@/x/0' not found: /x is '@/net.hidden', whose value is not part of "
            "the config tree ('!' or attribute access), so a path cannot continue below it",
            "/y",
            ("/y",),
            id="path-through-an-attribute-reference",
        ),
        pytest.param(
            {"m": {"type": {"type": "pair", "first": 1, "second": 2}}},
            "/m",
            ConfigTypeError,
            "/m: 'type' must evaluate to the name of a type (a string), got (1, 2)",
            "/m",
            ("/m",),
            id="type-not-a-string",
        ),
        pytest.param(
            {"a": "@/b", "b": "@/a"},
            "/a",
            CircularReferenceError,
            "circular reference: /a -> /b -> /a",
            "/a",
            ("/a", "/b"),
            id="cycle-of-two",
        ),
        pytest.param(
            {"a": "@/a"},
            "/a",
            CircularReferenceError,
            "circular reference: /a -> /a",
            "/a",
            ("/a",),
            id="self-reference",
        ),
        pytest.param(
            {"x": "@/a", "a": {"type": "pair", "first": 1, "second": "@/a"}},
            "/x",
            CircularReferenceError,
            "circular reference: /a -> /a/second -> /a (evaluation chain: /x -> /a -> /a/second -> /a)",
            "/a",
            ("/x", "/a", "/a/second"),
            id="reference-to-its-own-container",
        ),
        pytest.param(
            {"a": "@/b", "b": "@/a", "c": "@/a/x"},
            "/c",
            CircularReferenceError,
            "/c: reference '@/a/x': circular reference: /a -> /b -> /a",
            "/a",
            ("/c",),
            id="cycle-while-following-a-path",
        ),
        pytest.param(
            {"a": "@../../x"},
            "/a/k",
            ConfigKeyError,
            "config path '/a/k' not found: /a holds an invalid reference '@../../x': '..' climbs "
            "above the root",
            "/a/k",
            (),
            id="path-through-an-invalid-reference",
        ),
        pytest.param(
            {"a": 1},
            "/a.nope",
            ConfigTypeError,
            "config path '/a.nope': the int object at /a has no attribute 'nope'",
            "/a.nope",
            (),
            id="missing-attribute-of-an-access",
        ),
        pytest.param(
            {"a": {"x": 1}, "b": "@/a", "c": "@/b/y"},
            "/c",
            ConfigKeyError,
            "/c: reference '@/b/y' not found: /a has no key 'y' (its keys: 'x')",
            "/c",
            ("/c",),
            id="missing-key-below-a-followed-reference",
        ),
        pytest.param(
            {"b": "@/zz", "c": "@/b/y"},
            "/c",
            ConfigKeyError,
            "/b: reference '@/zz' not found: / has no key 'zz' (its keys: 'b', 'c')",
            "/b",
            ("/c",),
            id="followed-reference-to-a-missing-path",
        ),
    ],
)
def test_error_names_the_path_and_the_chain(
    tree: Any, path: str, error: type[ConfigError], message: str, where: str, trace: tuple[str, ...]
) -> None:
    with pytest.raises(error) as info:
        Config(tree, TYPES)[path]
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.path == where
    assert info.value.trace == trace


def test_a_raising_callable_is_wrapped_with_its_exception_chained() -> None:
    config = Config(
        {
            "trainer": {"type": "pair", "first": "@/model", "second": 0},
            "model": {"type": "Net", "hidden": 0},
        },
        TYPES,
    )
    with pytest.raises(ConfigError) as info:
        config["/trainer"]
    assert str(info.value) == (
        f"/model: type 'Net' ({Net.__module__}.Net) called with arguments (hidden) raised "
        "ValueError: hidden must be positive, got 0 "
        "(evaluation chain: /trainer -> /trainer/first -> /model)"
    )
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.path == "/model"


def test_wrong_arguments_name_the_arguments_given() -> None:
    with pytest.raises(
        ConfigError, match=re.escape("called with arguments (width) raised TypeError")
    ) as info:
        Config({"m": {"type": "Net", "width": 3}}, TYPES)["/m"]
    assert isinstance(info.value.__cause__, TypeError)


class NeedsTwo(ValueError):
    """A user's exception whose constructor does not take a single message."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


def divide(x: float) -> float:
    return 1 / x


def fail_with_two_arguments() -> None:
    raise NeedsTwo(7, "bad")


BUILTIN_CASES = [
    pytest.param(
        {"a": {"b": 1}},
        "/a/c",
        KeyError,
        r"^config path '/a/c' not found: /a has no key 'c'",
        id="missing-key",
    ),
    pytest.param(
        {"l": [1, 2]},
        "/l/2",
        IndexError,
        r"^config path '/l/2' not found: /l is a list of 2 items, so '2' is not a valid index",
        id="missing-index",
    ),
    pytest.param(
        {"l": [1], "r": "@/l/-2"},
        "/r",
        IndexError,
        r"^/r: reference '@/l/-2' not found: /l is a list of 1 items",
        id="missing-index-via-reference",
    ),
    pytest.param(
        {"l": [1, 2]},
        "/l/x",
        TypeError,
        r"so 'x' is not a valid index \(expected an integer",
        id="index-not-an-integer",
    ),
    pytest.param(
        {"n": 3, "r": "@/n/x"},
        "/r",
        TypeError,
        r"^/r: reference '@/n/x' not found: /n is a int \(3\), not a dict or a list",
        id="item-of-a-scalar",
    ),
    pytest.param(
        {"m": {"type": "Nett"}},
        "/m",
        KeyError,
        r"^/m: unknown type 'Nett' \(did you mean 'Net'\?\)",
        id="unknown-type",
    ),
    pytest.param(
        {"m": {"type": ["Net"]}},
        "/m",
        TypeError,
        r"^/m: 'type' must evaluate to the name of a type \(a string\), got \['Net'\]",
        id="type-not-a-name",
    ),
    pytest.param(
        {"a": "@/b", "b": ["@/a"]},
        "/a",
        RuntimeError,
        r"^circular reference: /a -> /b -> /b/0 -> /a$",
        id="circular-reference",
    ),
    pytest.param(
        {"n": {"type": "Net", "hidden": 1}, "w": "@/n.width"},
        "/w",
        TypeError,
        r"^/w: reference '@/n.width': the Net object at /n has no attribute 'width' nor an item "
        r"'width' \(TypeError: 'Net' object is not subscriptable\)$",
        id="missing-attribute",
    ),
    pytest.param(
        {"m": {"type": "Net", "hidden": -1}},
        "/m",
        ValueError,
        r"^/m: type 'Net' \(.*Net\) called with arguments \(hidden\) raised ValueError: hidden must be positive, got -1$",
        id="callable-raises-value-error",
    ),
    pytest.param(
        {"m": {"type": "Net", "width": 1}},
        "/m",
        TypeError,
        r"^/m: type 'Net' .* called with arguments \(width\) raised TypeError: .*'width'",
        id="callable-given-a-wrong-argument",
    ),
    pytest.param(
        {"m": {"type": "divide", "x": 0}},
        "/m",
        ZeroDivisionError,
        r"^/m: type 'divide' .* raised ZeroDivisionError: division by zero$",
        id="callable-raises-any-exception",
    ),
    pytest.param(
        {"m": {"type": "two"}},
        "/m",
        ValueError,
        r"^/m: type 'two' .* raised NeedsTwo: 7: bad$",
        id="callable-raises-an-exception-needing-two-arguments",
    ),
]


@pytest.mark.parametrize(("tree", "path", "builtin", "message"), BUILTIN_CASES)
def test_every_error_is_the_builtin_exception_ppe_raises_with_a_clear_message(
    tree: Any, path: str, builtin: type[Exception], message: str
) -> None:
    types = {**TYPES, "divide": divide, "two": fail_with_two_arguments}
    config = Config(tree, types)
    with pytest.raises(builtin, match=message) as info:  # what PPE 0.9 user code catches
        config[path]
    assert isinstance(info.value, ConfigError)
    assert info.value.path.startswith("/")


def test_an_exception_from_a_callable_keeps_its_class_and_is_chained() -> None:
    config = Config(
        {"m": {"type": "divide", "x": 0}, "t": {"type": "two"}},
        {"divide": divide, "two": fail_with_two_arguments},
    )
    with pytest.raises(ZeroDivisionError) as info:
        config["/m"]
    assert type(info.value).__name__ == "ConfigZeroDivisionError"
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError) as again:
        config["/m"]
    assert type(again.value) is type(info.value)
    # NeedsTwo cannot be built from a message: the error is its nearest base that can
    with pytest.raises(ConfigValueError) as nearest:
        config["/t"]
    assert not isinstance(nearest.value, NeedsTwo)
    assert isinstance(nearest.value.__cause__, NeedsTwo)


def test_the_error_classes_derive_from_the_builtins() -> None:
    assert issubclass(ConfigKeyError, KeyError)
    assert issubclass(ConfigIndexError, IndexError)
    assert issubclass(ConfigIndexError, ConfigKeyError)  # every missing path is a KeyError too
    assert issubclass(ConfigTypeError, TypeError)
    assert issubclass(ConfigValueError, ValueError)
    assert issubclass(ConfigAttributeError, AttributeError)
    assert issubclass(CircularReferenceError, RuntimeError)
    with pytest.raises(KeyError) as info:
        Config({"l": []})["/l/0"]
    assert not str(info.value).startswith("'"), "KeyError's message is shown without quotes"


def test_config_stays_usable_after_an_error() -> None:
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return len(calls)

    config = Config({"bad": ["@/ok", "@/bad"], "ok": {"type": "count"}}, {"count": count})
    for _ in range(2):
        with pytest.raises(
            CircularReferenceError, match=r"circular reference: /bad -> /bad/1 -> /bad$"
        ):
            config["/bad"]
    assert config["/ok"] == 1
    assert calls == [1]


def test_invalid_access_paths_are_rejected() -> None:
    config = Config({"a": 1})
    with pytest.raises(
        ConfigKeyError, match=r"invalid config path '/\.\.': '\.\.' climbs above the root"
    ):
        config["/.."]
    with pytest.raises(ConfigKeyError, match=r"empty attribute name in 'a\.'"):
        config["/a."]
    with pytest.raises(TypeError, match=r"config paths are strings such as '/model/lr', got 3"):
        config[3]  # type: ignore[index]


def test_a_very_long_reference_chain_fails_with_a_config_error() -> None:
    tree: dict[str, Any] = {"r0": 0}
    tree.update({f"r{i}": f"@/r{i - 1}" for i in range(1, 5000)})
    with pytest.raises(
        ConfigError, match=r"'/r4999' nests deeper than Python's recursion limit"
    ) as info:
        Config(tree)["/r4999"]
    assert isinstance(info.value, RecursionError)  # what PPE raises
    assert Config(tree)["/r100"] == 0
