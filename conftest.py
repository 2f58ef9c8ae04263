"""Repository-wide pytest hooks: tests marked ``gpu`` skip cleanly without CUDA.

Kept free of torch imports so that ppe-config's torch-less environment can use it.
"""

from __future__ import annotations

import importlib.util

import pytest


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)


def _register_hypothesis_profiles() -> None:
    # CI runs the property tests derandomized (the same examples every run, so a red CI is
    # reproducible); developers get fresh random examples by default.
    if importlib.util.find_spec("hypothesis") is None:
        return
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_register_hypothesis_profiles()
