"""Property: evaluating random configs with references equals a straightforward resolution."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras.config import CircularReferenceError, Config

Key = tuple[Any, ...]


class Box:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and other.kwargs == self.kwargs

    def __repr__(self) -> str:
        return f"Box({self.kwargs!r})"


class Cycle(Exception):
    pass


# ---------------------------------------------------------------- the reference model


def get(tree: Any, path: Key) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def resolve(text: str, base: Key) -> Key:
    """Where ``@text`` written in the container ``base`` points (the docs' rule)."""
    if text.startswith("/"):
        result: list[Any] = []
        text = text[1:]
    else:
        result = list(base)
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            result.pop()
        else:
            result.append(part)
    return tuple(result)


def canonical(tree: Any, path: Key) -> Key:
    out: list[Any] = []
    for key in path:
        if isinstance(tree, list):
            key = int(key)
        out.append(key)
        tree = tree[key]
    return tuple(out)


def model(tree: Any, path: Key, stack: tuple[Key, ...] = ()) -> Any:
    node = get(tree, path)
    if path in stack:
        raise Cycle
    stack = (*stack, path)
    if isinstance(node, str) and node.startswith("@"):
        target = canonical(tree, resolve(node[1:], path[:-1]))
        return model(tree, target, stack)
    if isinstance(node, dict):
        values = {k: model(tree, (*path, k), stack) for k in node if k != "type"}
        return Box(**values) if "type" in node else values
    if isinstance(node, list):
        return [model(tree, (*path, i), stack) for i in range(len(node))]
    return node


# ---------------------------------------------------------------- random configs

leaves = st.one_of(st.integers(-3, 3), st.text("xyz", max_size=2), st.none(), st.booleans())
keys = st.text("abcd", min_size=1, max_size=2)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(keys, children, max_size=3),
        st.dictionaries(keys, children, max_size=3).map(lambda d: {"type": "box", **d}),
    )


trees = st.dictionaries(
    keys, st.recursive(leaves, containers, max_leaves=20), min_size=1, max_size=4
)


def all_paths(tree: Any, path: Key = ()) -> list[Key]:
    paths = [path]
    if isinstance(tree, dict):
        for k, v in tree.items():
            paths += all_paths(v, (*path, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            paths += all_paths(v, (*path, i))
    return paths


def set_at(tree: Any, path: Key, value: Any) -> None:
    get(tree, path[:-1])[path[-1]] = value


def reference(source: Key, target: Key, relative: bool) -> str:
    if not relative:
        return "@/" + "/".join(map(str, target))
    base = source[:-1]
    common = 0
    while common < min(len(base), len(target)) and base[common] == target[common]:
        common += 1
    parts = [".."] * (len(base) - common) + [str(k) for k in target[common:]]
    return "@" + ("/".join(parts) or ".")


@st.composite
def configs_with_references(draw: st.DrawFn) -> dict[str, Any]:
    tree = draw(trees)
    paths = all_paths(tree)
    replaceable = [
        p for p in paths if p and p[-1] != "type" and not isinstance(get(tree, p), (dict, list))
    ]
    for source in replaceable:
        if draw(st.booleans()):
            target = draw(st.sampled_from(paths))
            set_at(tree, source, reference(source, target, draw(st.booleans())))
    return tree


def path_text(path: Key) -> str:
    return "/" + "/".join(map(str, path))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=configs_with_references(), data=st.data())
def test_evaluation_equals_straightforward_reference_resolution(
    tree: Any, data: st.DataObject
) -> None:
    snapshot = copy.deepcopy(tree)
    built: list[Box] = []

    def box(**kwargs: Any) -> Box:
        built.append(Box(**kwargs))
        return built[-1]

    config = Config(tree, {"box": box})
    paths = all_paths(tree)
    for path in data.draw(st.permutations(paths)):
        try:
            expected = model(tree, path)
        except Cycle:
            try:
                config[path_text(path)]
            except CircularReferenceError:
                continue
            raise AssertionError(f"{path_text(path)} is in a cycle, yet evaluated") from None
        assert config[path_text(path)] == expected
    n_typed = sum(isinstance(get(tree, p), dict) and "type" in get(tree, p) for p in paths)
    assert len(built) <= n_typed, "a callable ran more than once"
    for path in paths:
        assert config["!" + path_text(path)] is get(tree, path)
    assert tree == snapshot


@settings(max_examples=60, deadline=None)
@given(tree=configs_with_references())
def test_a_dumped_config_reloads_to_the_same_values(tree: Any) -> None:
    import json
    import os
    import tempfile

    types = {"box": Box}
    original = Config(tree, types)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "dumped.json")
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(original["!/"], stream)
        reloaded = Config.load_path(path, types=types)
    assert reloaded["!/"] == tree
    for path_ in all_paths(tree):
        text = path_text(path_)
        try:
            expected = original[text]
        except CircularReferenceError:
            try:
                reloaded[text]
            except CircularReferenceError:
                continue
            raise AssertionError(f"{text} evaluated after reloading, not before") from None
        assert reloaded[text] == expected
