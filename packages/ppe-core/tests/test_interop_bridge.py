"""The array-bridge plugin hook, exercised with real distributions on ``sys.path``.

A bridge plugin is a real module plus a real ``*.dist-info`` folder declaring
the entry point, written to ``tmp_path``; ``importlib.metadata`` discovers it
exactly as it would an installed wheel. Only the "no bridge installed" case
empties the entry point group by patching ``importlib.metadata.entry_points``,
since the test environment may have ppe-runtime-cuda installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy
import pytest
import torch

from pytorch_pfn_extras.interop import (
    BRIDGE_ENTRY_POINT_GROUP,
    ArrayBridge,
    as_ndarray,
    bridges,
    from_ndarray,
    get_xp,
    register_bridge,
    reload_bridges,
    unregister_bridge,
)

INSTALL_HINT = r'pip install "ppe-runtime-cuda\[cupy\]"'

# A toy array library whose arrays "live" on the meta device.
PLUGIN_SOURCE = """
import sys

import torch


class TinyArray:
    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype


class TinyBridge:
    def accepts_array(self, obj):
        return isinstance(obj, TinyArray)

    def accepts_device(self, device):
        return device.type == "meta"

    def from_ndarray(self, ndarray):
        return torch.empty(ndarray.shape, dtype=ndarray.dtype, device="meta")

    def as_ndarray(self, tensor):
        return TinyArray(tuple(tensor.shape), tensor.dtype)

    def get_xp(self, obj):
        return sys.modules[__name__]


def not_a_bridge():
    return 42
"""


@pytest.fixture(autouse=True)
def _fresh_bridges() -> Iterator[None]:
    reload_bridges()
    yield
    reload_bridges()


Installer = Callable[..., ModuleType]


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """Write a plugin module and a dist-info declaring it; return a function that does so."""
    written: list[str] = []

    def install(attribute: str = "TinyBridge", *, target: str | None = None) -> ModuleType:
        name = f"ppe_tiny_bridge_{uuid.uuid4().hex[:10]}"
        root = tmp_path / name
        root.mkdir()
        (root / f"{name}.py").write_text(PLUGIN_SOURCE)
        dist_info = root / f"{name}-1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (dist_info / "entry_points.txt").write_text(
            f"[{BRIDGE_ENTRY_POINT_GROUP}]\ntiny = {target or name}:{attribute}\n"
        )
        monkeypatch.syspath_prepend(str(root))
        written.append(name)
        return ModuleType(name)

    yield install
    for name in written:
        sys.modules.pop(name, None)


@pytest.fixture
def no_bridges_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real_entry_points = importlib.metadata.entry_points

    def entry_points(**params: Any) -> Any:
        if params.get("group") == BRIDGE_ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints(())
        return real_entry_points(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    reload_bridges()


def _imported(module: ModuleType) -> ModuleType:
    return sys.modules[module.__name__]


# ---------------------------------------------------------------- no bridge


@pytest.mark.usefixtures("no_bridges_installed")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_device_without_bridge_says_which_distribution_to_install(device: str) -> None:
    assert bridges() == ()
    with pytest.raises(ImportError, match=INSTALL_HINT) as info:
        get_xp(torch.device(device))
    assert device in str(info.value)


@pytest.mark.usefixtures("no_bridges_installed")
def test_cupy_array_without_bridge_says_which_distribution_to_install() -> None:
    # A stand-in for cupy.ndarray: CuPy cannot be installed on a machine without CUDA.
    cupy_like = type("ndarray", (), {"__module__": "cupy._core.core"})()
    with pytest.raises(ImportError, match=rf"cupy._core.core.ndarray.*{INSTALL_HINT}"):
        from_ndarray(cupy_like)
    with pytest.raises(ImportError, match=INSTALL_HINT):
        get_xp(cupy_like)


@pytest.mark.usefixtures("no_bridges_installed")
def test_numpy_and_cpu_paths_work_without_any_bridge() -> None:
    array = numpy.arange(3.0)
    assert as_ndarray(from_ndarray(array)) is not None
    assert get_xp(torch.device("cpu")) is numpy


# ---------------------------------------------------------------- entry points


def test_bridge_from_entry_point_handles_its_arrays_and_devices(
    install_plugin: Installer,
) -> None:
    plugin = install_plugin()
    reload_bridges()
    assert "TinyBridge" in [type(b).__name__ for b in bridges()]
    module = _imported(plugin)

    tensor = from_ndarray(module.TinyArray((2, 3), torch.float16))
    assert tensor.device.type == "meta"
    assert tensor.shape == (2, 3)
    assert tensor.dtype is torch.float16

    array = as_ndarray(torch.empty(4, 5, device="meta", dtype=torch.int8))
    assert isinstance(array, module.TinyArray)
    assert array.shape == (4, 5)

    assert get_xp(torch.device("meta")) is module
    assert get_xp(torch.empty(1, device="meta")) is module
    assert get_xp(array) is module


def test_entry_points_are_loaded_only_when_a_non_numpy_object_is_met(
    install_plugin: Installer,
) -> None:
    plugin = install_plugin()
    reload_bridges()
    from_ndarray(numpy.ones(3))
    as_ndarray(torch.ones(3))
    get_xp(torch.ones(3))
    get_xp(torch.device("cpu"))
    get_xp(numpy.ones(3))
    assert plugin.__name__ not in sys.modules
    get_xp(torch.device("meta"))
    assert plugin.__name__ in sys.modules


def test_reload_bridges_picks_up_a_plugin_installed_after_the_first_lookup(
    install_plugin: Installer,
) -> None:
    before = bridges()
    install_plugin()
    assert bridges() == before  # discovery is cached
    with pytest.raises(ValueError, match="got meta"):
        get_xp(torch.device("meta"))
    reload_bridges()
    assert len(bridges()) == len(before) + 1
    assert isinstance(get_xp(torch.device("meta")), ModuleType)


def test_entry_point_that_fails_to_import_is_reported_with_its_name(
    install_plugin: Installer,
) -> None:
    install_plugin(target="ppe_module_that_does_not_exist")
    reload_bridges()
    with pytest.raises(ImportError, match=rf"bridge 'tiny' .*{BRIDGE_ENTRY_POINT_GROUP}"):
        get_xp(torch.device("meta"))
    with pytest.raises(ImportError, match="ppe_module_that_does_not_exist"):
        bridges()  # a failure is not cached: the next lookup retries


def test_entry_point_returning_a_non_bridge_is_rejected(install_plugin: Installer) -> None:
    install_plugin("not_a_bridge")
    reload_bridges()
    with pytest.raises(TypeError, match="returned int, which does not implement ArrayBridge"):
        bridges()


# ---------------------------------------------------------------- registration


def _bridge_class(plugin: ModuleType) -> Any:
    return importlib.import_module(plugin.__name__).TinyBridge


def test_registered_bridge_is_used_before_entry_point_bridges(
    install_plugin: Installer,
) -> None:
    plugin = install_plugin()
    reload_bridges()

    class Preferred(_bridge_class(plugin)):  # type: ignore[misc]
        def get_xp(self, obj: Any) -> ModuleType:
            return numpy

    preferred = Preferred()
    assert isinstance(preferred, ArrayBridge)
    register_bridge(preferred)
    try:
        assert bridges()[0] is preferred
        assert "TinyBridge" in [type(b).__name__ for b in bridges()]
        assert get_xp(torch.device("meta")) is numpy
    finally:
        unregister_bridge(preferred)
    assert preferred not in bridges()
    assert get_xp(torch.device("meta")) is _imported(plugin)


def test_registering_the_same_bridge_twice_keeps_one_entry(install_plugin: Installer) -> None:
    plugin = install_plugin()
    bridge = _bridge_class(plugin)()
    register_bridge(bridge)
    register_bridge(bridge)
    try:
        assert [b for b in bridges() if b is bridge] == [bridge]
    finally:
        unregister_bridge(bridge)


@pytest.mark.parametrize(
    "bad", [object(), numpy, "cupy"], ids=lambda v: "object" if type(v) is object else repr(v)
)
def test_register_bridge_rejects_objects_that_are_not_bridges(bad: Any) -> None:
    with pytest.raises(TypeError, match=rf"expects an ArrayBridge .* got {type(bad).__name__}"):
        register_bridge(bad)


def test_unregister_bridge_rejects_a_bridge_that_was_not_registered(
    install_plugin: Installer,
) -> None:
    bridge = _bridge_class(install_plugin())()
    with pytest.raises(ValueError, match="is not a registered bridge"):
        unregister_bridge(bridge)
