"""Fixtures of the integration tests: those of ppe-training's tests (free ports, mpirun,
torchrun); and ``source_imports.py``, the helper of the import checks, registered as the module
``ppe_tests_source_imports`` (this directory is not on ``sys.path``).

The component's tests run alone too (only that component installed), so the fixtures live
in its tree; this tree, which has the whole repository, loads that file instead of copying it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("ppe_tests_source_imports", _HERE / "source_imports.py")
_fixtures = _load(
    "ppe_integration_tests_fixtures", _HERE.parent / "packages/ppe-training/tests/conftest.py"
)
free_port = _fixtures.free_port  # type: ignore[attr-defined]
mpirun = _fixtures.mpirun  # type: ignore[attr-defined]
torchrun = _fixtures.torchrun  # type: ignore[attr-defined]
