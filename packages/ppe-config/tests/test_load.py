"""Config.load_path: JSON, YAML, custom loaders, imports with overrides, dumping back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytorch_pfn_extras.config import (
    CircularReferenceError,
    Config,
    ConfigTypeError,
    ConfigValueError,
)


def write(path: Path, tree: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    else:
        path.write_text(json.dumps(tree), encoding="utf-8")
    return path


TREE = {"model": {"type": "scale", "x": 3, "factor": "@/factor"}, "factor": 2, "name": "run"}
TYPES = {"scale": lambda x, factor: x * factor}


@pytest.mark.parametrize("name", ["config.json", "config.yaml", "config.yml", "CONFIG.YAML"])
def test_load_path_reads_json_and_infers_yaml_from_the_suffix(tmp_path: Path, name: str) -> None:
    config = Config.load_path(write(tmp_path / name, TREE), types=TYPES)
    assert config["/model"] == 6
    assert config["!/"] == TREE


@pytest.mark.parametrize(
    "loader",
    [yaml.safe_load, yaml.full_load, json.load, lambda path: json.loads(Path(path).read_text())],
    ids=["yaml.safe_load", "yaml.full_load", "json.load", "path-loader"],
)
def test_load_path_accepts_stream_parsers_and_path_loaders(tmp_path: Path, loader: Any) -> None:
    path = tmp_path / "config.txt"
    path.write_text(json.dumps(TREE), encoding="utf-8")  # JSON is YAML too
    config = Config.load_path(str(path), loader=loader, types=TYPES)
    assert config["/model"] == 6


def test_a_path_loader_gets_every_file_path(tmp_path: Path) -> None:
    write(tmp_path / "base.json", {"a": 1})
    main = write(tmp_path / "main.json", {"import": "base.json", "b": 2})
    seen: list[str] = []

    def loader(path: str) -> Any:
        seen.append(path)
        return json.loads(Path(path).read_text())

    assert Config.load_path(main, loader=loader)["/"] == {"a": 1, "b": 2}
    assert [Path(p).name for p in seen] == ["main.json", "base.json"]


def test_import_merges_files_with_local_overrides(tmp_path: Path) -> None:
    write(
        tmp_path / "base.yaml",
        {
            "model": {"type": "MLP", "hidden": [64, 32], "dropout": 0.1},
            "optimizer": {"type": "SGD", "lr": 0.1, "momentum": 0.9},
            "epochs": 10,
            "tags": ["a", "b"],
        },
    )
    write(tmp_path / "sub" / "extra.json", {"epochs": 20, "seed": 1})
    main = write(
        tmp_path / "main.yaml",
        {
            "import": ["base.yaml", "sub/extra.json"],
            "model": {"hidden": [128]},
            "optimizer": {"type": "Adam", "lr": 0.001},
            "tags": ["c"],
            "seed": 7,
        },
    )
    assert Config.load_path(main)["!/"] == {
        "model": {"type": "MLP", "hidden": [128], "dropout": 0.1},
        "optimizer": {"type": "Adam", "lr": 0.001},
        "epochs": 20,
        "tags": ["c"],
        "seed": 7,
    }


def test_a_local_dict_without_type_merges_into_a_typed_import(tmp_path: Path) -> None:
    write(tmp_path / "base.json", {"optimizer": {"type": "SGD", "lr": 0.1, "momentum": 0.9}})
    main = write(tmp_path / "main.json", {"import": "base.json", "optimizer": {"lr": 0.5}})
    assert Config.load_path(main)["!/optimizer"] == {"type": "SGD", "lr": 0.5, "momentum": 0.9}


def test_imports_nest_relative_to_the_importing_file(tmp_path: Path) -> None:
    write(tmp_path / "a" / "b" / "leaf.json", {"leaf": 1, "shared": "leaf"})
    write(tmp_path / "a" / "mid.json", {"import": "b/leaf.json", "mid": 2, "shared": "mid"})
    write(tmp_path / "a" / "other.json", {"import": "b/leaf.json", "other": 3})
    main = write(tmp_path / "main.json", {"import": ["a/mid.json", "a/other.json"], "ref": "@/mid"})
    config = Config.load_path(main)
    # a diamond (leaf imported twice) is not a cycle; later imports override earlier ones
    assert config["!/"] == {"leaf": 1, "shared": "leaf", "mid": 2, "other": 3, "ref": "@/mid"}
    assert config["/ref"] == 2


def test_circular_imports_are_reported_with_the_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.json", {"import": "b.json"})
    write(tmp_path / "b.json", {"import": "sub/c.json"})
    write(tmp_path / "sub" / "c.json", {"import": "../a.json"})
    with pytest.raises(CircularReferenceError) as info:
        Config.load_path(tmp_path / "a.json")
    a, b, c, back = (
        str(tmp_path / "a.json"),
        str(tmp_path / "b.json"),
        str(tmp_path / "sub" / "c.json"),
        str(tmp_path / "sub" / "../a.json"),
    )
    assert str(info.value) == f"circular import: {a} -> {b} -> {c} -> {back}"


def test_a_file_importing_itself_is_circular(tmp_path: Path) -> None:
    path = write(tmp_path / "self.json", {"import": "self.json"})
    with pytest.raises(
        CircularReferenceError, match=r"circular import: .*self\.json -> .*self\.json$"
    ):
        Config.load_path(path)


def test_a_missing_import_names_the_importing_file(tmp_path: Path) -> None:
    main = write(tmp_path / "main.json", {"import": "nope.json"})
    with pytest.raises(FileNotFoundError) as info:
        Config.load_path(main)
    assert str(info.value) == (
        f"[Errno 2] config file imported by {str(main)!r} does not exist: "
        f"{str(tmp_path / 'nope.json')!r}"
    )


def test_a_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.json"):
        Config.load_path(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (
            {"import": 3},
            r"main\.json: /import must be a file name or a list of file names, got 3",
        ),
        (
            {"model": {"import": ["a.json", 1]}},
            r"main\.json: /model/import must be a file name or a list .*got \['a\.json', 1\]",
        ),
        (
            {"import": "list.json", "seed": 1},
            r"main\.json: the key 'seed' beside /import overrides a value of .*list\.json, in "
            r"which / is a list of 2 items, so 'seed' is not a valid index",
        ),
        (
            {"data": {"import": ["list.json", "list.json"]}},
            r"list\.json \(imported by .*main\.json at /data/import\) holds a list, which "
            r"cannot be merged with other imports or the sibling keys \(none\)",
        ),
    ],
)
def test_bad_imports_are_type_errors_naming_the_file_and_the_place(
    tmp_path: Path, tree: Any, message: str
) -> None:
    write(tmp_path / "list.json", [1, 2])
    with pytest.raises(ConfigTypeError, match=message) as info:
        Config.load_path(write(tmp_path / "main.json", tree))
    assert isinstance(info.value, TypeError)  # PPE's os.path / item assignment raise TypeError


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"a": 1,}', encoding="utf-8")
    with pytest.raises(
        ConfigValueError, match=r"broken\.json: invalid JSON: Expecting property name"
    ) as info:
        Config.load_path(path)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_yaml_without_pyyaml_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "config.yaml", TREE)
    monkeypatch.setitem(sys.modules, "yaml", None)  # what an environment without PyYAML sees
    with pytest.raises(ImportError, match=r'needs PyYAML: pip install "ppe-config\[yaml\]"'):
        Config.load_path(path)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_dumped_back_reloads_to_the_same_values(tmp_path: Path, suffix: str) -> None:
    write(tmp_path / "base.json", {"model": {"type": "scale", "x": 3, "factor": 1}, "factor": 2})
    main = write(
        tmp_path / f"main{suffix}",
        {
            "import": "base.json",
            "model": {"factor": "@/factor"},
            "name": "run",
            "list": [1, "@/factor"],
        },
    )
    config = Config.load_path(main, types=TYPES)
    config.update_via_args([("/factor", "5")])
    dumped = tmp_path / f"dumped{suffix}"
    write(dumped, config["!/"])
    reloaded = Config.load_path(dumped, types=TYPES)
    assert reloaded["!/"] == config["!/"]
    assert (
        reloaded["/"]
        == config["/"]
        == {
            "model": 15,
            "factor": 5,
            "name": "run",
            "list": [1, 5],
        }
    )


def test_imports_at_any_depth_merge_with_their_sibling_keys(tmp_path: Path) -> None:
    """An ``import`` inside a dict (or a list item) loads a file there, relative to the file
    that holds the key, and the keys beside it override the imported ones."""
    write(tmp_path / "configs" / "parts" / "model.yaml", {"type": "MLP", "hidden": [64, 32]})
    write(tmp_path / "configs" / "parts" / "layer.yaml", {"type": "Linear", "units": 5})
    write(tmp_path / "shared" / "sgd.json", {"type": "SGD", "lr": 0.1, "momentum": 0.9})
    main = tmp_path / "configs" / "main.yaml"
    main.write_text(
        "model:\n"
        "  import: parts/model.yaml\n"
        "  hidden: [128]\n"
        "optimizer:\n"
        "  import: ../shared/sgd.json\n"
        "  lr: 0.5\n"
        "  params: '@/model'\n"
        "layers:\n"
        "  - import: parts/layer.yaml\n"
        "    units: 10\n"
        "  - {import: parts/layer.yaml}\n",
        encoding="utf-8",
    )
    types: dict[str, Any] = {
        "MLP": lambda hidden: ("MLP", hidden),
        "Linear": lambda units: ("Linear", units),
        "SGD": lambda params, lr, momentum: ("SGD", params, lr, momentum),
    }
    config = Config.load_path(main, types=types)
    assert config["!/"] == {
        "model": {"type": "MLP", "hidden": [128]},
        "optimizer": {"type": "SGD", "lr": 0.5, "momentum": 0.9, "params": "@/model"},
        "layers": [{"type": "Linear", "units": 10}, {"type": "Linear", "units": 5}],
    }
    assert config["/optimizer"] == ("SGD", ("MLP", [128]), 0.5, 0.9)
    assert config["/layers"] == [("Linear", 10), ("Linear", 5)]


def test_a_nested_import_is_relative_to_the_file_that_holds_it(tmp_path: Path) -> None:
    write(tmp_path / "a" / "b" / "relu.json", {"type": "ReLU", "inplace": False})
    write(
        tmp_path / "a" / "block.json",
        {"activation": {"import": "b/relu.json", "inplace": True}, "width": 8},
    )
    main = write(
        tmp_path / "main.json",
        {"import": "a/block.json", "head": {"import": "a/block.json", "width": 2}},
    )
    assert Config.load_path(main)["!/"] == {
        "activation": {"type": "ReLU", "inplace": True},
        "width": 8,
        "head": {"activation": {"type": "ReLU", "inplace": True}, "width": 2},
    }


def test_an_import_without_sibling_keys_places_any_value(tmp_path: Path) -> None:
    write(tmp_path / "sizes.yaml", [64, 32, 16])
    main = write(tmp_path / "main.yaml", {"hidden": {"import": "sizes.yaml"}, "n": "@/hidden/-1"})
    config = Config.load_path(main)
    assert config["/hidden"] == [64, 32, 16]
    assert config["/n"] == 16


def test_a_config_without_imports_is_returned_as_read(tmp_path: Path) -> None:
    tree = {"a": {"b": [1, {"c": 2}]}, "d": "@/a/b/1/c"}
    read: list[Any] = []

    def loader(path: str) -> Any:
        read.append(json.loads(Path(path).read_text()))
        return read[-1]

    config = Config.load_path(write(tmp_path / "plain.json", tree), loader=loader)
    assert config["!/"] is read[0]
    assert config["/d"] == 2


def test_a_circular_import_at_depth_is_a_runtime_error_naming_the_files(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"model": {"import": "sub/b.yaml", "lr": 1}})
    write(tmp_path / "sub" / "b.yaml", {"layers": [{"import": "../a.yaml"}]})
    with pytest.raises(RuntimeError) as info:
        Config.load_path(tmp_path / "a.yaml")
    assert isinstance(info.value, CircularReferenceError)
    a, b, back = tmp_path / "a.yaml", tmp_path / "sub" / "b.yaml", tmp_path / "sub" / "../a.yaml"
    assert str(info.value) == f"circular import: {a} -> {b} -> {back}"


def test_a_file_importing_itself_at_depth_is_circular(tmp_path: Path) -> None:
    path = write(tmp_path / "self.json", {"x": {"y": {"import": "self.json"}}})
    with pytest.raises(RuntimeError, match=r"^circular import: .*self\.json -> .*self\.json$"):
        Config.load_path(path)
