from __future__ import annotations

import sys

import pytest


@pytest.fixture
def no_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import cupy`` fail, as on a machine where CuPy is not installed."""
    monkeypatch.setitem(sys.modules, "cupy", None)
