"""No distribution imports another distribution's private modules or names.

A component states its requirement on another one as a compatible range (``ppe-core>=0.1,<0.2``),
and the version of a component speaks for its public API only (docs/versions.md): a micro release
of ppe-core may rename, move or delete ``pytorch_pfn_extras.interop._checks``. So a component may
use, of a subpackage that another distribution owns, only the public paths: an import whose path
below ``pytorch_pfn_extras`` has a component starting with ``_`` (a private module such as
``runtime._batch``, or a private name such as ``from pytorch_pfn_extras.writing import _helper``)
fails this test, unless it stays inside the distribution that owns the subpackage. Dunder names
(``__version__``) are public. The files directly under ``pytorch_pfn_extras/`` (``_version.py``,
``__main__.py``) belong to the meta-package, so a component importing ``pytorch_pfn_extras._version``
fails too.

A component's own tests (``packages/<dist>/tests``) are held to the same rule: they run against
the lowest ppe-core the component's range allows (docs/versions.md), so they too may see only
what every release in the range has. The integration tests in ``tests/`` run the workspace at one
version of everything and are not checked.

Who owns what is read from the layout on disk: ``packages/<dist>/src/pytorch_pfn_extras/<sub>/``
is owned by ``<dist>``, and the modules in ``src/pytorch_pfn_extras/`` by the meta-package.

Every import statement counts, function-local ones and those under ``if TYPE_CHECKING:`` too:
the latter do not run, but mypy and ``typing.get_type_hints`` resolve them, so a consumer whose
annotations name a private module breaks on the same micro release as one that imports it. A
constant module name given to ``importlib.import_module(...)`` counts as an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

# registered by conftest.py, which loads source_imports.py (this directory is not on sys.path)
from ppe_tests_source_imports import from_base  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]

NAMESPACE = "pytorch_pfn_extras"
META = "pytorch-pfn-extras"


def _sources() -> dict[str, Path]:
    """Distribution -> its ``src`` folder."""
    sources = {META: ROOT / "src"}
    for src in sorted((ROOT / "packages").glob("*/src")):
        sources[src.parent.name] = src
    return sources


def _owners(sources: dict[str, Path]) -> dict[str, str]:
    """First name below the namespace (a subpackage, or a meta-package module) -> distribution."""
    owners: dict[str, str] = {}
    for dist, src in sources.items():
        for path in sorted((src / NAMESPACE).iterdir()):
            if path.name == "__pycache__" or path.name.startswith("."):
                continue
            if path.is_dir():
                name = path.name
            elif path.suffix == ".py" and path.stem != "__init__":
                name = path.stem
            else:
                continue
            assert name not in owners, f"{name} is in both {owners[name]} and {dist}"
            owners[name] = dist
    return owners


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """(module or ``module.name``, line) of every import statement, wherever it is."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module, is_package)
            for alias in node.names:
                yield (f"{base}.{alias.name}" if alias.name != "*" else base), node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _violations(
    source: str, module: str, is_package: bool, dist: str, owners: dict[str, str]
) -> list[tuple[int, str, str]]:
    """(line, imported name, owner) of each import of another distribution's private part."""
    found = []
    for name, line in _imported_names(ast.parse(source), module, is_package):
        parts = name.split(".")
        if len(parts) < 2 or parts[0] != NAMESPACE:
            continue
        owner = owners.get(parts[1])
        if owner is None or owner == dist:
            continue
        if any(_is_private(part) for part in parts[1:]):
            found.append((line, name, owner))
    return found


OWNERS_FOR_UNIT = {"interop": "ppe-core", "training": "ppe-training", "_version": META}
_CHECKS = "pytorch_pfn_extras.interop._checks"


def _found_in_training(source: str) -> list[tuple[str, str]]:
    """(imported name, owner) of the violations in ``source``, as ppe-training's module."""
    module = "pytorch_pfn_extras.training.x"
    found = _violations(source, module, False, "ppe-training", OWNERS_FOR_UNIT)
    return [(name, owner) for _, name, owner in found]


@pytest.mark.parametrize(
    ("source", "name", "owner"),
    [
        (
            "from pytorch_pfn_extras.interop._checks import is_int\n",
            f"{_CHECKS}.is_int",
            "ppe-core",
        ),
        ("import pytorch_pfn_extras.interop._checks\n", _CHECKS, "ppe-core"),
        ("from pytorch_pfn_extras.interop import _checks\n", _CHECKS, "ppe-core"),
        (
            "from pytorch_pfn_extras.interop import _private_name\n",
            "pytorch_pfn_extras.interop._private_name",
            "ppe-core",
        ),
        ("from ..interop._checks import is_int\n", f"{_CHECKS}.is_int", "ppe-core"),
        (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from pytorch_pfn_extras.interop._checks import is_int\n",
            f"{_CHECKS}.is_int",
            "ppe-core",
        ),
        (
            "def f():\n    from pytorch_pfn_extras.interop._checks import is_int\n",
            f"{_CHECKS}.is_int",
            "ppe-core",
        ),
        (
            "import importlib\nimportlib.import_module('pytorch_pfn_extras.interop._checks')\n",
            _CHECKS,
            "ppe-core",
        ),
        ("from pytorch_pfn_extras import _version\n", "pytorch_pfn_extras._version", META),
    ],
)
def test_the_detector_finds_a_private_import_across_distributions(
    source: str, name: str, owner: str
) -> None:
    assert _found_in_training(source) == [(name, owner)]


@pytest.mark.parametrize(
    "source",
    [
        "from pytorch_pfn_extras.interop import is_int\n",  # public
        "import pytorch_pfn_extras.interop\n",
        "from pytorch_pfn_extras.training._state import x\n",  # its own subpackage
        "from ._state import x\n",
        "from pytorch_pfn_extras.interop import __version__\n",  # dunder
        "from os import _exit\nimport torch._C\n",  # not ours
    ],
)
def test_the_detector_lets_public_and_own_imports_through(source: str) -> None:
    assert _found_in_training(source) == []


def _files(sources: dict[str, Path]) -> Iterator[tuple[str, Path, str, bool]]:
    """(distribution, path, module name, is a package) of each source and test file."""
    for dist, src in sources.items():
        for path in sorted((src / NAMESPACE).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            yield dist, path, ".".join(parts), is_package
        for path in sorted((src.parent / "tests").rglob("*.py")):  # none for the meta-package
            yield dist, path, f"{dist}_tests.{path.stem}", path.name == "__init__.py"


def test_no_distribution_imports_a_private_part_of_another() -> None:
    sources = _sources()
    owners = _owners(sources)
    # the layout was read: every distribution owns something
    assert set(owners.values()) == set(sources) and len(sources) == 7
    assert owners["interop"] == "ppe-core" and owners["training"] == "ppe-training"
    lines = []
    files = 0
    for dist, path, module, is_package in _files(sources):
        files += 1
        for line, name, owner in _violations(path.read_text(), module, is_package, dist, owners):
            lines.append(
                f"{path.relative_to(ROOT)}:{line} ({dist}) imports {name}, private to {owner}"
            )
    assert files > 300  # the sources and the tests of every distribution
    if lines:
        pytest.fail(
            "imports of another distribution's private modules or names:\n" + "\n".join(lines)
        )
