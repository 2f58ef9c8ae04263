"""Path access, substitution rules, customize_type and lazy, cached evaluation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pytorch_pfn_extras.config import Config, customize_type


class Box:
    """A type whose instances record what they were built from."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and other.kwargs == self.kwargs

    def total(self) -> int:
        return sum(v for v in self.kwargs.values() if isinstance(v, int))


TREE = {
    "a": {"b": [10, {"c": "deep"}, [1, 2]], "s": "plain"},
    "n": None,
    "flag": False,
    "numbers": (1, 2, 3),
    0: "integer key",
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/a/b/0", 10),
        ("/a/b/1/c", "deep"),
        ("/a/b/2", [1, 2]),
        ("/a/b/-1/-2", 1),
        ("/a/s", "plain"),
        ("/n", None),
        ("/flag", False),
        ("/numbers", (1, 2, 3)),
        ("/numbers/2", 3),
        ("/0", "integer key"),
        ("/a/b/1/", {"c": "deep"}),
        ("a/b/0", 10),  # a path without a leading slash starts at the root
        ("/a/./b/../s", "plain"),
        ("/", TREE),
    ],
)
def test_path_access_returns_the_value_at_the_path(path: str, expected: Any) -> None:
    assert Config(TREE)[path] == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/ref_abs", "plain"),
        ("/nested/ref_rel", "plain"),
        ("/nested/deeper/ref_up2", "plain"),
        ("/nested/sibling", 3),
        ("/list/0", "plain"),
        ("/list/1", 3),  # in a list, relative paths start at the list itself
        ("/through/x", 1),  # a path may continue through a reference
        ("/chain", "plain"),
        ("/whole", {"x": 1, "y": "plain"}),
        ("/attr", "PLAIN"),
    ],
)
def test_references_are_replaced_by_their_targets(path: str, expected: Any) -> None:
    config = Config(
        {
            "s": "plain",
            "ref_abs": "@/s",
            "nested": {
                "three": 3,
                "ref_rel": "@../s",
                "sibling": "@three",
                "deeper": {"ref_up2": "@../../s"},
            },
            "list": ["@../s", "@../nested/three"],
            "target": {"x": 1, "y": "@/s"},
            "alias": "@/target",
            "through": "@/alias",
            "chain": "@/through/y",
            "whole": "@/alias",
            "attr": "@/s.upper",
        }
    )
    value = config[path]
    assert (value() if callable(value) else value) == expected


def test_attribute_access_chains_and_works_in_getitem() -> None:
    config = Config(
        {
            "box": {"type": "Box", "a": 2, "b": 3},
            "kwargs_a": "@/box.kwargs",
            "size": "@/box.kwargs.__len__",
        },
        {"Box": Box},
    )
    assert config["/kwargs_a"] == {"a": 2, "b": 3}
    assert config["/size"]() == 2
    assert config["/box.total"]() == 5
    assert config["/box.kwargs.copy"]() == {"a": 2, "b": 3}


class Splits:
    """A dataset whose splits are a dict and whose layers a list: items behind attributes."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.splits = {name: Box(n_data=n) for name, n in sizes.items()}
        self.layers = [Box(units=n) for n in sorted(sizes.values())]

    def __getitem__(self, key: str) -> str:
        return f"item {key}"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/train_size", 8),  # '@/data.splits.train.kwargs.n_data': attribute, key, attributes
        ("/first_units", {"units": 2}),  # '@/data.layers.0.kwargs': a list index
        ("/last_units", 8),  # '@/data.layers.-1.kwargs.units': negative index, then a key
        ("/plain_key", 3),  # '@/plain.b': a dict node of the config itself
        ("/plain_index", "y"),  # '@/plain.l.1'
        ("/int_key", "zero"),  # '@/int_keys.0': the YAML key 0
        ("/item", "item n_data"),  # '@/data.n_data': no such attribute, so data['n_data']
        ("/data.splits.valid.kwargs.n_data", 2),  # the same steps in a config access
        ("/.plain.b", 3),  # attribute steps on the root value
        ("/plain/.l.0", "x"),
    ],
)
def test_attribute_steps_fall_back_to_dict_keys_and_list_indices(path: str, expected: Any) -> None:
    config = Config(
        {
            "data": {"type": "Splits", "sizes": {"train": 8, "valid": 2}},
            "plain": {"b": 3, "l": ["x", "y"]},
            "int_keys": {0: "zero"},
            "train_size": "@/data.splits.train.kwargs.n_data",
            "first_units": "@/data.layers.0.kwargs",
            "last_units": "@/data.layers.-1.kwargs.units",
            "plain_key": "@/plain.b",
            "plain_index": "@/plain.l.1",
            "int_key": "@/int_keys.0",
            "item": "@/data.n_data",
        },
        {"Splits": Splits},
    )
    assert config[path] == expected


def test_an_attribute_wins_over_an_item_of_the_same_name() -> None:
    config = Config({"d": {"keys": 1, "other": 2}, "ref": "@/d.keys", "item": "@/d/keys"})
    assert sorted(config["/ref"]()) == ["keys", "other"]  # dict.keys, the method
    assert config["/item"] == 1  # a path step reads the key


def test_an_attribute_step_naming_neither_attribute_nor_item_raises_what_the_item_access_raised() -> (
    None
):
    config = Config({"d": {"a": 1}, "l": [1, 2], "r": "@/d.b", "s": "@/l.2"})
    with pytest.raises(
        KeyError,
        match=r"^/r: reference '@/d.b': the dict object at /d has no attribute 'b' nor a key "
        r"'b' \(its keys: 'a'\)$",
    ):
        config["/r"]
    with pytest.raises(
        IndexError,
        match=r"^config path '/l.2': the list object at /l has no attribute '2' nor an item "
        r"'2' \(its valid indices: \[0, 2\)\)$",
    ):
        config["/l.2"]


def test_typed_nodes_call_functions_classes_and_lambdas_with_evaluated_arguments() -> None:
    config = Config(
        {
            "box": {"type": "Box", "a": 1, "inner": {"type": "Box", "b": "@/two"}},
            "two": {"type": "add", "x": 1, "y": 1},
            "lam": {"type": "pair", "first": "@/two", "second": ["@/two", {"k": "@/two"}]},
        },
        {"Box": Box, "add": lambda x, y: x + y, "pair": lambda first, second: (first, second)},
    )
    assert config["/box"] == Box(a=1, inner=Box(b=2))
    assert config["/lam"] == (2, [2, {"k": 2}])


def test_a_path_below_a_typed_node_reads_its_argument_without_calling_it() -> None:
    calls = Counter[str]()

    def make(n_class: int, name: str) -> str:
        calls["make"] += 1
        return f"{name}:{n_class}"

    config = Config(
        {"d": {"type": "make", "n_class": 10, "name": "@/name"}, "name": "x"}, {"make": make}
    )
    assert config["/d/n_class"] == 10
    assert config["/d/name"] == "x"
    assert config["/d/type"] == "make"
    assert calls["make"] == 0
    assert config["/d"] == "x:10"


def test_raw_access_returns_the_input_unchanged_and_evaluates_nothing() -> None:
    raw = {"type": "explode", "arg": "@/missing"}
    tree = {"node": raw, "ref": "@/node"}

    def explode(arg: Any) -> None:
        raise AssertionError("raw access must not evaluate")

    config = Config(tree, {"explode": explode})
    assert config["!/node"] is raw
    assert config["!/ref"] == "@/node"
    assert config["!/"] is tree
    assert config["!/node/arg"] == "@/missing"


def test_raw_reference_yields_the_raw_subtree() -> None:
    config = Config({"spec": {"type": "Box", "a": 1}, "copy": "@!/spec"}, {"Box": Box})
    assert config["/copy"] == {"type": "Box", "a": 1}
    assert config["/spec"] == Box(a=1)


def test_each_callable_runs_once_and_shared_references_get_the_same_object() -> None:
    calls = Counter[str]()

    def counted(name: str) -> Box:
        calls[name] += 1
        return Box(name=name)

    config = Config(
        {
            "model": {"type": "counted", "name": "model"},
            "optimizer": {"type": "pair", "first": "@/model", "second": "@/model"},
            "again": "@/model",
            "unused": {"type": "counted", "name": "unused"},
        },
        {"counted": counted, "pair": lambda first, second: (first, second)},
    )
    first, second = config["/optimizer"]
    assert first is second is config["/model"] is config["/again"]
    config["/"]
    config["/optimizer"]
    assert calls == {"model": 1, "unused": 1}


def test_callables_run_only_when_their_value_is_needed() -> None:
    calls: list[str] = []

    def record(name: str) -> str:
        calls.append(name)
        return name

    config = Config(
        {"a": {"type": "record", "name": "a"}, "b": {"type": "record", "name": "b"}, "c": "@/b"},
        {"record": record},
    )
    assert calls == []
    assert config["/c"] == "b"
    assert calls == ["b"]


def test_type_may_be_computed_by_a_reference_or_a_typed_node() -> None:
    config = Config(
        {
            "kind": "Box",
            "by_ref": {"type": "@/kind", "a": 1},
            "by_call": {"type": {"type": "choose", "options": ["nope", "Box"]}, "b": 2},
        },
        {"Box": Box, "choose": lambda options: options[-1]},
    )
    assert config["/by_ref"] == Box(a=1)
    assert config["/by_call"] == Box(b=2)


@customize_type(n_class="/n_class", name="../label", size="@../sizes/0")
def described(n_class: int, name: str, size: int) -> str:
    return f"{name}:{n_class}:{size}"


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"type": "described"}, "outer:5:7"),
        ({"type": "described", "n_class": 3}, "outer:3:7"),
        ({"type": "described", "name": "own", "size": "@/n_class"}, "own:5:5"),
    ],
)
def test_customize_type_fills_missing_arguments_from_paths(
    node: dict[str, Any], expected: str
) -> None:
    config = Config(
        {"n_class": 5, "label": "outer", "sizes": [7], "d": node}, {"described": described}
    )
    assert config["/d"] == expected


def test_customize_type_defaults_are_inherited_by_subclasses() -> None:
    @customize_type(n="/n")
    class Base:
        def __init__(self, n: int) -> None:
            self.n = n

    class Child(Base):
        pass

    assert Config({"n": 4, "c": {"type": "Child"}}, {"Child": Child})["/c"].n == 4


def test_customize_type_rejects_a_non_string_path() -> None:
    with pytest.raises(TypeError, match=r"argument 'n_class' must be a config path string.*got 5"):
        customize_type(n_class=5)  # type: ignore[arg-type]


def test_customize_type_rejects_a_builtin_it_cannot_annotate() -> None:
    with pytest.raises(TypeError, match=r"cannot annotate <built-in function len>"):
        customize_type(n="/n")(len)


def test_input_tree_is_not_modified_by_evaluation() -> None:
    import copy

    tree = {"a": {"type": "Box", "x": "@/b"}, "b": [1, {"c": 2}], "d": "@/b/1"}
    snapshot = copy.deepcopy(tree)
    config = Config(tree, {"Box": Box})
    config["/"]
    assert tree == snapshot


def test_types_mapping_is_copied() -> None:
    types: dict[str, Any] = {"Box": Box}
    config = Config({"a": {"type": "Box"}}, types)
    types["Box"] = lambda: "replaced"
    assert config["/a"] == Box()
