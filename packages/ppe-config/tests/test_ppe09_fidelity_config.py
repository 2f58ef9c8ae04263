"""PPE 0.9's config behaviour: a failed attribute step raises what its item access raised, and
the keys beside the import of a list override values inside that list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras.config import Config, ConfigError


class Net:
    def __init__(self, hidden: int) -> None:
        self.hidden = hidden


class Registry:
    """An object whose items are looked up by name (``__getitem__`` raises ``KeyError``)."""

    def __init__(self, **entries: int) -> None:
        self.entries = entries

    def __getitem__(self, name: str) -> int:
        return self.entries[name]


class Ring:
    """A sequence-like object (``__getitem__`` takes ints, raises ``IndexError``)."""

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < 3:
            message = f"ring index {index} out of range"
            raise IndexError(message)
        return index * 10


TREE = {
    "d": {"a": 1, "nested": {"x": 2}},
    "l": [10, 20],
    "n": 3,
    "net": {"type": "Net", "hidden": 4},
    "registry": {"type": "Registry", "train": 8},
    "ring": {"type": "Ring"},
}
# References that fail (kept apart: an access to '/.x' evaluates the whole tree)
REFERENCES = {"width": "@/net.width", "split": "@/registry.valid", "fourth": "@/ring.3"}
TYPES: dict[str, Any] = {"Net": Net, "Registry": Registry, "Ring": Ring}


@pytest.mark.parametrize(
    ("path", "native", "message"),
    [
        pytest.param(
            "/.d.b",
            KeyError,
            r"^config path '/\.d\.b': the dict object at /\.d has no attribute 'b' nor a key 'b' "
            r"\(its keys: 'a', 'nested'\)$",
            id="missing-dict-key",
        ),
        pytest.param(
            "/.d.nested.y",
            KeyError,
            r"the dict object at /\.d\.nested has no attribute 'y' nor a key 'y' \(its keys: 'x'\)",
            id="missing-key-of-a-nested-dict",
        ),
        pytest.param(
            "/.l.2",
            IndexError,
            r"^config path '/\.l\.2': the list object at /\.l has no attribute '2' nor an item "
            r"'2' \(its valid indices: \[0, 2\)\)$",
            id="list-index-out-of-range",
        ),
        pytest.param("/.l.-3", IndexError, r"no attribute '-3' nor an item '-3'", id="negative"),
        pytest.param(
            "/.l.first",
            TypeError,
            r"the list object at /\.l has no attribute 'first' nor an item 'first'",
            id="list-index-not-an-integer",
        ),
        pytest.param(
            "/.n.b",
            TypeError,
            r"^config path '/\.n\.b': the int object at /\.n has no attribute 'b' nor an item 'b' "
            r"\(TypeError: 'int' object is not subscriptable\)$",
            id="item-of-a-scalar",
        ),
        pytest.param(
            "/.d.a.b",
            TypeError,
            r"the int object at /\.d\.a has no attribute 'b'",
            id="item-of-a-scalar-in-a-dict",
        ),
        pytest.param(
            "/width",
            TypeError,
            r"^/width: reference '@/net\.width': the Net object at /net has no attribute 'width' "
            r"nor an item 'width' \(TypeError: 'Net' object is not subscriptable\)$",
            id="object-without-the-attribute",
        ),
        pytest.param(
            "/split",
            KeyError,
            r"^/split: reference '@/registry\.valid': the Registry object at /registry has no "
            r"attribute 'valid' nor an item 'valid' \(KeyError: 'valid'\)$",
            id="object-whose-getitem-raises-key-error",
        ),
        pytest.param(
            "/fourth",
            IndexError,
            r"the Ring object at /ring has no attribute '3' nor an item '3' \(IndexError: ring "
            r"index 3 out of range\)",
            id="object-whose-getitem-raises-index-error",
        ),
    ],
)
def test_a_failed_attribute_step_raises_what_its_item_access_raised(
    path: str, native: type[Exception], message: str
) -> None:
    config = Config({**TREE, **REFERENCES} if path.lstrip("/") in REFERENCES else TREE, TYPES)
    with pytest.raises(native, match=message) as info:  # what PPE 0.9 user code catches
        config[path]
    assert isinstance(info.value, ConfigError)
    assert not isinstance(info.value, AttributeError)
    try:  # the handler a PPE 0.9 user writes for that step
        config[path]
    except native as error:
        assert str(error) == str(info.value)


def test_attribute_steps_that_find_an_item_still_work() -> None:
    config = Config(TREE, TYPES)
    assert config["/.d.nested.x"] == 2
    assert config["/.l.-1"] == 20
    assert config["/registry.train"] == 8  # no attribute 'train': registry["train"]
    assert config["/ring.2"] == 20
    assert config["/net.hidden"] == 4


# ------------------------------------------------------------------------ imports of a list


def write(path: Path, tree: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tree), encoding="utf-8")
    return path


LAYERS: list[dict[str, Any]] = [
    {"type": "Linear", "units": 5, "bias": True},
    {"type": "Linear", "units": 7, "bias": True},
    {"type": "ReLU"},
]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"0/units": 3},
            [{**LAYERS[0], "units": 3}, LAYERS[1], LAYERS[2]],
            id="a-key-of-an-item",
        ),
        pytest.param(
            {"1": {"bias": False}},
            [LAYERS[0], {**LAYERS[1], "bias": False}, LAYERS[2]],
            id="an-item-merged-key-by-key",
        ),
        pytest.param(
            {"2": {"type": "Tanh"}},
            [LAYERS[0], LAYERS[1], {"type": "Tanh"}],
            id="an-item-of-another-type-replaced",
        ),
        pytest.param(
            {"-1/inplace": True, "/0/units": 1},
            [{**LAYERS[0], "units": 1}, LAYERS[1], {"type": "ReLU", "inplace": True}],
            id="negative-index-and-leading-slash",
        ),
        pytest.param(
            {"0/units": 2, "0": {"bias": False}},
            [{**LAYERS[0], "units": 2, "bias": False}, LAYERS[1], LAYERS[2]],
            id="several-keys-in-order",
        ),
    ],
)
def test_keys_beside_the_import_of_a_list_override_values_in_it(
    tmp_path: Path, overrides: dict[str, Any], expected: list[Any]
) -> None:
    write(tmp_path / "parts" / "layers.json", LAYERS)
    main = write(
        tmp_path / "main.json",
        {
            "import": "parts/layers.json",
            **overrides,
        },
    )
    assert Config.load_path(main)["!/"] == expected


def test_an_overridden_list_import_at_depth_is_evaluated_and_the_file_is_left_alone(
    tmp_path: Path,
) -> None:
    write(tmp_path / "parts" / "layers.json", LAYERS)
    main = write(
        tmp_path / "main.json",
        {
            "model": {"import": "parts/layers.json", "0/units": "@/width", "1/units": 9},
            "plain": {"import": "parts/layers.json"},
            "width": 64,
        },
    )
    types: dict[str, Any] = {
        "Linear": lambda units, bias: f"Linear({units}, bias={bias})",
        "ReLU": lambda: "ReLU()",
    }
    config = Config.load_path(main, types=types)
    assert config["/model"] == ["Linear(64, bias=True)", "Linear(9, bias=True)", "ReLU()"]
    assert config["/model/1/units"] == 9
    assert config["!/plain"] == LAYERS  # the same file imported without overrides
    assert json.loads((tmp_path / "parts" / "layers.json").read_text()) == LAYERS


def test_an_integer_key_beside_the_import_of_a_list_is_an_index(tmp_path: Path) -> None:
    """YAML reads ``0: {...}`` as the int 0: it names the item as ``'0'`` does."""
    trees: dict[str, Any] = {
        "main.cfg": {"import": "layers.cfg", 0: {"units": 1}},
        "layers.cfg": LAYERS,
    }
    config = Config.load_path(tmp_path / "main.cfg", loader=lambda path: trees[Path(path).name])
    assert config["!/0/units"] == 1


def test_a_path_key_beside_the_import_of_a_dict_overrides_the_value_at_that_path(
    tmp_path: Path,
) -> None:
    write(tmp_path / "base.json", {"model": {"layers": LAYERS, "name": "mlp"}, "epochs": 3})
    main = write(
        tmp_path / "main.json",
        {"import": "base.json", "model/layers/1/units": 32, "optimizer/lr": 0.1, "epochs": 5},
    )
    assert Config.load_path(main)["!/"] == {
        "model": {"layers": [LAYERS[0], {**LAYERS[1], "units": 32}, LAYERS[2]], "name": "mlp"},
        "optimizer": {"lr": 0.1},  # a path that does not exist in a dict is added
        "epochs": 5,
    }


@pytest.mark.parametrize(
    ("key", "native", "message"),
    [
        pytest.param(
            "3/units",
            IndexError,
            r"main\.json: the key '3/units' beside /import overrides a value of .*layers\.json, "
            r"in which / is a list of 3 items, so '3' is not a valid index \(expected an integer "
            r"in \[0, 3\)\)$",
            id="index-out-of-range",
        ),
        pytest.param(
            "seed",
            TypeError,
            r"the key 'seed' beside /import .* in which / is a list of 3 items, so 'seed' is not "
            r"a valid index",
            id="not-an-index",
        ),
        pytest.param(
            "0/units/x",
            TypeError,
            r"the key '0/units/x' beside /import .* in which /0/units is a int \(5\), not a dict "
            r"or a list, so it has no item 'x'",
            id="through-a-scalar",
        ),
    ],
)
def test_a_key_beside_the_import_of_a_list_that_names_no_item_raises_the_native_error(
    tmp_path: Path, key: str, native: type[Exception], message: str
) -> None:
    write(tmp_path / "layers.json", LAYERS)
    main = write(tmp_path / "main.json", {"import": "layers.json", key: 1})
    with pytest.raises(native, match=message) as info:
        Config.load_path(main)
    assert isinstance(info.value, ConfigError)
    assert info.value.path == "/import"
