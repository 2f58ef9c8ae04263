"""Config.update_via_args: strings cast to the existing type, cached values forgotten."""

from __future__ import annotations

from typing import Any

import pytest

from pytorch_pfn_extras.config import Config, ConfigError, ConfigValueError

TREE = {
    "lr": 0.1,
    "epochs": 10,
    "debug": False,
    "name": "run",
    "seed": None,
    "hidden": [64, 32],
    "opts": {"a": 1},
    "pair": (1, 2),
    "ref": "@/lr",
    "layers": [{"size": 3}],
    3: "int key",
}


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("/lr", "0.01", 0.01),
        ("/lr", "3", 3.0),
        ("/epochs", "20", 20),
        ("/epochs", " -2 ", -2),
        ("/debug", "true", True),
        ("/debug", "TRUE", True),
        ("/debug", "False", False),
        ("/name", "other", "other"),
        ("/name", "@/lr", "@/lr"),
        ("/seed", "7", 7),
        ("/seed", "null", None),
        ("/hidden", "[128, 64, 32]", [128, 64, 32]),
        ("/hidden/1", "16", 16),
        ("/hidden/-1", "16", 16),
        ("/opts", '{"b": 2}', {"b": 2}),
        ("/pair", "[3, 4]", (3, 4)),
        ("/layers/0/size", "5", 5),
        ("/3", "new", "new"),
        ("/epochs", 2.5, 2.5),  # a value that is not a string is stored as given
        ("/hidden", (1,), (1,)),
    ],
)
def test_update_casts_strings_to_the_existing_type(path: str, value: Any, expected: Any) -> None:
    config = Config(TREE)
    config.update_via_args([(path, value)])
    result = config["!" + path]
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "/debug",
            "yes",
            r"/debug holds a bool, so its new value must be 'true' or 'false', got 'yes'",
        ),
        ("/epochs", "1.5", r"/epochs holds int 10, and '1.5' is not a valid int"),
        ("/lr", "fast", r"/lr holds float 0.1, and 'fast' is not a valid float"),
        (
            "/hidden",
            "[1,",
            r"/hidden holds \[64, 32\], so its new value is parsed as JSON, and '\[1,' is not valid JSON",
        ),
        ("/hidden", "64", r"/hidden holds a list; expected a JSON array, got '64'"),
        ("/opts", "[1]", r"/opts holds a dict; expected a JSON object, got '\[1\]'"),
    ],
)
def test_update_rejects_strings_that_do_not_fit_the_existing_type(
    path: str, value: str, message: str
) -> None:
    config = Config(TREE)
    with pytest.raises(ConfigValueError, match=message) as info:
        config.update_via_args([(path, value)])
    assert isinstance(info.value, ValueError)  # what PPE raises for a value it cannot cast


def test_update_rejects_casting_a_string_to_an_arbitrary_object() -> None:
    config = Config({"obj": object()})
    with pytest.raises(  # PPE calls object("x"): a TypeError
        TypeError, match=r"/obj holds a value of type object, which a string cannot be cast to"
    ):
        config.update_via_args([("/obj", "x")])


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        (
            "/missing",
            KeyError,
            r"config path '/missing' does not exist in the raw config: / has no key 'missing'",
        ),
        (
            "/hidden/5",
            IndexError,
            r"config path '/hidden/5' does not exist in the raw config: /hidden is a list of 2 "
            r"items, so '5' is not a valid index \(expected an integer in \[0, 2\)\)",
        ),
        ("/hidden/x", TypeError, r"/hidden is a list of 2 items, so 'x' is not a valid index"),
        (
            "/ref/x",
            TypeError,
            r"/ref is a str \('@/lr'\), not a dict or a list, so it has no item 'x' \(update the "
            r"path the reference points to instead of going through it\)",
        ),
        ("/", KeyError, r"expected the path of a value such as '/optimizer/lr', got '/'"),
        ("!/lr", KeyError, r"got '!/lr' \(no '!', no attribute access, not the root\)"),
        ("/lr.real", KeyError, r"got '/lr.real'"),
    ],
)
def test_update_rejects_paths_that_do_not_exist(
    path: str, error: type[Exception], message: str
) -> None:
    config = Config(TREE)
    with pytest.raises(ConfigError, match=message) as info:
        config.update_via_args([(path, "1")])
    assert isinstance(info.value, error)
    assert info.value.path == path


def test_updates_apply_together_or_not_at_all() -> None:
    config = Config(TREE)
    with pytest.raises(ValueError, match="/epochs"):
        config.update_via_args([("/lr", "0.5"), ("/epochs", "many")])
    assert config["/lr"] == 0.1


def test_update_forgets_cached_values_and_leaves_the_input_alone() -> None:
    tree = {"model": {"type": "scale", "x": 2, "factor": "@/factor"}, "factor": 3}
    config = Config(tree, {"scale": lambda x, factor: x * factor})
    assert config["/model"] == 6
    config.update_via_args([("/factor", "10"), ("/model/x", "4")])
    assert config["/model"] == 40
    assert tree == {"model": {"type": "scale", "x": 2, "factor": "@/factor"}, "factor": 3}


def test_update_accepts_argparse_style_pairs() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--set", nargs=2, action="append", default=[], metavar=("PATH", "VALUE"))
    args = parser.parse_args(["--set", "/lr", "0.5", "--set", "/debug", "true"])
    config = Config(TREE)
    config.update_via_args(args.set)
    assert (config["/lr"], config["/debug"], config["/ref"]) == (0.5, True, 0.5)
