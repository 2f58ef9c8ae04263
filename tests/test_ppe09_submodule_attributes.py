"""After ``import pytorch_pfn_extras as ppe``, every public module path of PPE 0.9 is an attribute.

PPE 0.9's package ``__init__`` files import their submodules, so user code reaches
``ppe.training.extensions.log_report`` or ``ppe.dataset.tabular.tabular_dataset`` without importing
them. Ours do too, but for the subpackages the meta-package imports on first use and ppe-onnx's
command-line modules, imported at their first use as an attribute (``python -m`` would warn about
a module imported before it runs); either way the attribute is the module
``importlib.import_module`` returns, and ``dir()`` lists it.

Where a package of 0.9 holds a name that is also one of its module paths (``ppe.ops.register``,
``ppe.onnx.annotate``, ``ppe.onnx.export_testcase``, ``ppe.dataset.tabular.from_data``), 0.9's
attribute is the function, and so is ours.

The module paths come from ``data/ppe09_module_paths.txt``, the copy of the spec's list that
``test_ppe09_module_paths.py`` reads too. Each check runs in a fresh interpreter, where nothing
but ``pytorch_pfn_extras`` was imported before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_SPEC_FILE = Path(__file__).parent / "data" / "ppe09_module_paths.txt"

# The optional dependencies and compiler stacks that no import of a module path may pull in.
_HEAVY = (
    "matplotlib", "onnx", "onnxruntime", "ignite", "optuna", "slack_sdk", "tensorboard", "pandas",
    "ipywidgets", "cupy", "yaml", "torch._dynamo", "torch._inductor", "torch.onnx",
)  # fmt: skip

# Runs in a fresh interpreter: argv[1] is the spec file. Reads every path as an attribute of
# ``ppe`` (``dir()`` of its parent first, before anything imports it), and only then imports the
# paths, so no attribute can come from the import done for the comparison.
_PROBE = """
import functools, importlib, json, sys, types
import pytorch_pfn_extras as ppe

paths = {}
for line in open(sys.argv[1], encoding="utf-8"):
    module, _, names = line.partition(":")
    paths[module.strip()] = [name.strip() for name in names.split(",") if name.strip()]

found = {}
for path in [path for path in paths if "." in path]:
    *parent, last = path.split(".")[1:]
    try:
        package = functools.reduce(getattr, parent, ppe)
        listed = last in dir(package)
        found[path] = (functools.reduce(getattr, [*parent, last], ppe), listed)
    except AttributeError as error:
        found[path] = (error, False)
heavy = [name for name in HEAVY if name in sys.modules]

report = {}
for path, (value, listed) in found.items():
    parent, _, last = path.rpartition(".")
    if isinstance(value, AttributeError):
        report[path] = f"attribute access failed: {value}"
        continue
    module = importlib.import_module(path)
    if last in paths.get(parent, []):  # 0.9's package holds a name that is also a module path
        expected = getattr(importlib.import_module(parent), last)
        ok = value is expected and not isinstance(value, types.ModuleType)
        report[path] = None if ok else f"got {value!r}, expected {parent}'s own {last} {expected!r}"
    elif value is not module:
        report[path] = f"got {value!r}, expected the module {module!r}"
    elif not listed:
        report[path] = f"dir({parent}) does not list {last!r}"
    else:
        report[path] = None
print(json.dumps({"report": report, "heavy": heavy}))
"""


def _module_paths() -> list[str]:
    lines = _SPEC_FILE.read_text(encoding="utf-8").splitlines()
    return [line.partition(":")[0].strip() for line in lines if line.strip()]


def _run(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def probe() -> dict[str, object]:
    code = f"HEAVY = {_HEAVY!r}\n{_PROBE}"
    result: dict[str, object] = json.loads(_run(code, str(_SPEC_FILE)))
    return result


@pytest.mark.parametrize("path", [p for p in _module_paths() if "." in p])
def test_module_path_is_an_attribute_chain_from_ppe(probe: dict[str, object], path: str) -> None:
    report = probe["report"]
    assert isinstance(report, dict)
    assert report[path] is None, f"ppe.{path.removeprefix('pytorch_pfn_extras.')}: {report[path]}"


def test_resolving_every_module_path_imports_no_optional_dependency(
    probe: dict[str, object],
) -> None:
    assert probe["heavy"] == []


@pytest.mark.parametrize(
    "name",
    [
        "ops.register",
        "onnx.annotate",
        "onnx.export_testcase",
        "dataset.tabular.from_data",
        "training.extensions.snapshot",  # the function; no module has this path
    ],
)
def test_a_packages_function_stays_after_the_module_of_that_name_is_imported(name: str) -> None:
    code = (
        "import importlib, types\n"
        "import pytorch_pfn_extras as ppe\n"
        "try:\n"
        f"    importlib.import_module('pytorch_pfn_extras.{name}')\n"
        "except ImportError:\n"
        "    pass\n"
        f"print(callable(ppe.{name}) and not isinstance(ppe.{name}, types.ModuleType))\n"
    )
    assert _run(code).strip() == "True"


def test_an_unknown_attribute_of_a_package_raises_attribute_error_naming_it() -> None:
    import pytorch_pfn_extras as ppe

    with pytest.raises(AttributeError, match=r"'pytorch_pfn_extras.training.extensions'.*'slak'"):
        ppe.training.extensions.slak  # noqa: B018
    assert not hasattr(ppe.dataset.tabular, "tabular")


@pytest.mark.parametrize("module", ["strip_large_tensor", "unstrip_tensor"])
def test_onnx_command_line_modules_run_with_python_m_without_a_warning(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", f"pytorch_pfn_extras.onnx.{module}", "--help"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "usage" in done.stdout
