"""A config that contains itself (a YAML alias inside its own anchor, a dict holding itself) is
a `ConfigValueError` naming the file and the key path where the cycle closes."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras.config import Config, ConfigValueError

RULE = (
    "a config must be a tree: a dict or list may be used in several places (a YAML anchor and "
    "its aliases) but may not contain itself"
)


@pytest.mark.parametrize(
    ("text", "at", "encloser", "kind"),
    [
        pytest.param("a: &x {b: *x}\n", "/a/b", "/a", "dict", id="dict-in-itself"),
        pytest.param("l: &y [*y]\n", "/l/0", "/l", "list", id="list-in-itself"),
        pytest.param(
            "top: 1\na: &x\n  b: &y\n    c: [1, *x]\n",
            "/a/b/c/1",
            "/a",
            "dict",
            id="through-a-list-and-a-second-anchor",
        ),
        pytest.param(
            "a: &x {b: &y {c: [*y], d: *x}}\n", "/a/b/c/0", "/a/b", "dict", id="two-anchors"
        ),
        pytest.param("&root {a: 1, again: *root}\n", "/again", "/", "dict", id="root"),
    ],
)
def test_a_recursive_yaml_anchor_names_the_file_and_the_key(
    tmp_path: Path, text: str, at: str, encloser: str, kind: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        Config.load_path(path)
    assert isinstance(info.value, ConfigValueError)
    assert str(info.value) == (
        f"{path}: the config contains itself: the value at {at} is the {kind} at {encloser} "
        f"that encloses it; {RULE}"
    )
    assert info.value.path == at


def test_a_recursive_anchor_in_an_imported_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "parts").mkdir()
    part = tmp_path / "parts" / "model.yaml"
    part.write_text("layers: &l [1, [2, *l]]\n", encoding="utf-8")
    main = tmp_path / "main.yaml"
    main.write_text("model: {import: parts/model.yaml}\n", encoding="utf-8")
    with pytest.raises(
        ConfigValueError,
        match=rf"^{re.escape(str(main.parent / 'parts/model.yaml'))}: the config contains "
        r"itself: the value at /layers/1/1 is the list at /layers that encloses it",
    ):
        Config.load_path(main)


def test_a_loader_returning_a_tree_that_contains_itself_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.cfg"
    path.write_text("unused", encoding="utf-8")

    def loader(name: str) -> Any:
        tree: dict[str, Any] = {"model": {"width": 3}}
        tree["model"]["parent"] = tree
        return tree

    with pytest.raises(
        ConfigValueError,
        match=rf"^{re.escape(str(path))}: the config contains itself: the value at "
        r"/model/parent is the dict at / that encloses it",
    ):
        Config.load_path(path, loader=loader)


def test_shared_yaml_anchors_that_do_not_contain_themselves_load(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "base: &b {lr: 0.1, sizes: &s [1, 2]}\nx: *b\ny: {inner: *b, sizes: *s, again: [*s, *s]}\n",
        encoding="utf-8",
    )
    config = Config.load_path(path)
    assert config["/y/inner"] == config["/x"] == {"lr": 0.1, "sizes": [1, 2]}
    assert config["/y/again"] == [[1, 2], [1, 2]]


def test_a_python_dict_holding_itself_fails_with_the_key_where_it_closes() -> None:
    tree: dict[str, Any] = {"lr": 0.1, "model": {"width": 3}}
    tree["model"]["parent"] = tree
    config = Config(tree)
    assert config["/model/width"] == 3  # paths that do not enter the cycle still work
    assert config["/model/parent/lr"] == 0.1
    with pytest.raises(ValueError) as info:
        config["/model"]
    assert isinstance(info.value, ConfigValueError)
    assert str(info.value) == (
        "evaluating config path '/model' nests deeper than Python's recursion limit "
        f"({sys.getrecursionlimit()}): the config contains itself: the value at /model/parent "
        f"is the dict at / that encloses it; {RULE}"
    )
    assert info.value.path == "/model/parent"


def test_a_python_list_holding_itself_reached_through_a_reference() -> None:
    items: list[Any] = [1]
    items.append(items)
    config = Config({"layers": items, "copy": "@/layers"})
    with pytest.raises(
        ConfigValueError,
        match=r"evaluating config path '/copy' nests deeper .*: the config contains itself: the "
        r"value at /layers/1 is the list at /layers that encloses it",
    ):
        config["/copy"]
