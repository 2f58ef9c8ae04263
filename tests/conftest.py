"""Fixtures of the integration tests: those of ppe-training's tests (free ports, mpirun,
torchrun).

The component's tests run alone too (only that component installed), so the fixtures live
in its tree; this tree, which has the whole repository, loads that file instead of copying it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "packages/ppe-training/tests/conftest.py"


def _load() -> object:
    spec = importlib.util.spec_from_file_location("ppe_integration_tests_fixtures", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _load()
free_port = _fixtures.free_port  # type: ignore[attr-defined]
mpirun = _fixtures.mpirun  # type: ignore[attr-defined]
torchrun = _fixtures.torchrun  # type: ignore[attr-defined]
