"""scripts/check_wheels.py must catch every way a wheel can break the shared namespace."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_wheels", ROOT / "scripts" / "check_wheels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONFIG_OK = [
    "pytorch_pfn_extras/config/__init__.py",
    "pytorch_pfn_extras/config/py.typed",
    "pytorch_pfn_extras/config_types/__init__.py",
    "pytorch_pfn_extras/config_types/py.typed",
    "ppe_config-0.1.0.dist-info/METADATA",
]


def test_a_well_formed_component_wheel_has_no_problems() -> None:
    assert load_checker().problems_of("ppe-config", CONFIG_OK) == []


def test_a_component_shipping_the_namespace_init_is_flagged() -> None:
    problems = load_checker().problems_of(
        "ppe-config", [*CONFIG_OK, "pytorch_pfn_extras/__init__.py"]
    )
    assert problems == [
        "ppe-config: pytorch_pfn_extras/__init__.py lies directly under pytorch_pfn_extras/"
    ]


def test_a_component_shipping_another_components_subpackage_is_flagged() -> None:
    problems = load_checker().problems_of("ppe-config", [*CONFIG_OK, "pytorch_pfn_extras/nn/x.py"])
    assert problems == [
        "ppe-config: pytorch_pfn_extras/nn/x.py belongs to a subpackage it does not own"
    ]


def test_a_missing_py_typed_is_flagged() -> None:
    names = [n for n in CONFIG_OK if n != "pytorch_pfn_extras/config_types/py.typed"]
    assert load_checker().problems_of("ppe-config", names) == [
        "ppe-config: pytorch_pfn_extras/config_types/py.typed is missing"
    ]


def test_the_meta_wheel_may_only_ship_its_own_files() -> None:
    checker = load_checker()
    ok = [
        "pytorch_pfn_extras/__init__.py",
        "pytorch_pfn_extras/__main__.py",
        "pytorch_pfn_extras/_version.py",
    ]
    assert checker.problems_of("pytorch-pfn-extras", ok) == []
    assert checker.problems_of("pytorch-pfn-extras", [*ok, "pytorch_pfn_extras/extra.py"]) == [
        "pytorch-pfn-extras: unexpected meta-package file pytorch_pfn_extras/extra.py"
    ]
