"""The meta-package: one namespace over seven wheels, and what a bug report needs."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys

import pytest

import pytorch_pfn_extras as ppe

SUBPACKAGES = (
    "config",
    "config_types",
    "cuda",
    "dataloaders",
    "dataset",
    "distributed",
    "engine",
    "handler",
    "interop",
    "logging",
    "nn",
    "onnx",
    "ops",
    "profiler",
    "reporting",
    "runtime",
    "testing",
    "torchscript",
    "training",
    "utils",
    "writing",
)
COMPONENTS = (
    "ppe-core",
    "ppe-training",
    "ppe-runtime-cuda",
    "ppe-onnx",
    "ppe-config",
    "ppe-dataset",
)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_subpackage_is_an_attribute_of_the_namespace(name: str) -> None:
    module = importlib.import_module(f"pytorch_pfn_extras.{name}")
    assert getattr(ppe, name) is module


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("to", "pytorch_pfn_extras.runtime"),
        ("map", "pytorch_pfn_extras.runtime"),
        ("compile", "pytorch_pfn_extras.runtime"),
        ("from_ndarray", "pytorch_pfn_extras.interop"),
        ("as_ndarray", "pytorch_pfn_extras.interop"),
        ("get_xp", "pytorch_pfn_extras.interop"),
        ("as_numpy_dtype", "pytorch_pfn_extras.interop"),
        ("from_numpy_dtype", "pytorch_pfn_extras.interop"),
    ],
)
def test_top_level_names_are_the_subpackage_objects(name: str, owner: str) -> None:
    assert getattr(ppe, name) is getattr(importlib.import_module(owner), name)


def test_version_is_the_meta_package_distribution_version() -> None:
    assert ppe.__version__ == importlib.metadata.version("pytorch-pfn-extras")
    assert ppe.__version__.startswith("1.")


def test_requires_is_true_for_the_installed_torch_and_older_versions() -> None:
    installed = importlib.metadata.version("torch")
    assert ppe.requires("2.1.0") is True
    assert ppe.requires(installed) is True
    assert ppe.requires(installed.split("+")[0]) is True  # a local suffix counts as the release
    assert ppe.requires("1.0", package="numpy") is True


def test_requires_is_false_for_a_newer_version_or_a_missing_package() -> None:
    assert ppe.requires("999.0") is False
    assert ppe.requires("999.0", package="numpy") is False
    assert ppe.requires("1.0", package="no-such-dist-xyz") is False


def test_requires_rejects_a_bad_version_string() -> None:
    with pytest.raises(ValueError, match="'not a version'"):
        ppe.requires("not a version")


def test_python_m_prints_every_component_torch_numpy_and_optional_versions() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytorch_pfn_extras"], check=True, capture_output=True, text=True
    ).stdout
    lines = {
        line.split()[0]: line.split(None, 1)[1]
        for line in out.splitlines()
        if line.startswith("  ")
    }
    for dist in (*COMPONENTS, "pytorch-pfn-extras", "torch", "numpy", "onnx", "optuna"):
        assert lines[dist] == importlib.metadata.version(dist)
    # An optional dependency shows its version where installed, "not installed" elsewhere:
    # compared with what this machine has, never assumed absent.
    for cupy in ("cupy-cuda13x", "cupy-cuda12x"):
        try:
            cupy_version = importlib.metadata.version(cupy)
        except importlib.metadata.PackageNotFoundError:
            cupy_version = "not installed"
        assert lines[cupy] == cupy_version


def test_import_pulls_in_no_optional_dependency_or_compiler_stack() -> None:
    heavy = [
        "matplotlib", "onnx", "onnxruntime", "ignite", "optuna", "slack_sdk", "tensorboard",
        "pandas", "ipywidgets", "cupy", "yaml", "torch._dynamo", "torch._inductor",
    ]  # fmt: skip
    code = (
        "import sys, json, pytorch_pfn_extras\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == []
