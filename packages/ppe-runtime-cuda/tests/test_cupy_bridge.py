"""The CuPy bridge: ppe-core's interop finds it through the entry point declared here."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from typing import Any

import numpy
import pytest
import torch

from pytorch_pfn_extras import interop
from pytorch_pfn_extras.cuda import CupyBridge

INSTALL_HINT = r'pip install "ppe-runtime-cuda\[cupy\]"'


@pytest.fixture(autouse=True)
def _fresh_bridges() -> Iterator[None]:
    interop.reload_bridges()
    yield
    interop.reload_bridges()


def test_bridge_is_declared_as_an_entry_point_and_discovered() -> None:
    declared = importlib.metadata.entry_points(group=interop.BRIDGE_ENTRY_POINT_GROUP)
    assert "pytorch_pfn_extras.cuda:CupyBridge" in [ep.value for ep in declared]
    assert CupyBridge() in interop.bridges()


def test_bridge_implements_the_interop_protocol() -> None:
    assert isinstance(CupyBridge(), interop.ArrayBridge)


def test_bridge_instances_are_interchangeable() -> None:
    bridge = CupyBridge()
    assert bridge == CupyBridge()
    assert hash(bridge) == hash(CupyBridge())
    assert bridge != object()
    interop.register_bridge(bridge)
    try:
        assert [b for b in interop.bridges() if isinstance(b, CupyBridge)] == [bridge]
    finally:
        interop.unregister_bridge(bridge)


@pytest.mark.parametrize(
    ("device", "accepted"),
    [("cuda", True), ("cuda:3", True), ("cpu", False), ("meta", False)],
)
def test_bridge_accepts_cuda_devices_only(device: str, accepted: bool) -> None:
    assert CupyBridge().accepts_device(torch.device(device)) is accepted


@pytest.mark.parametrize("obj", [numpy.zeros(2), torch.zeros(2), [1.0]], ids=repr)
def test_bridge_rejects_non_cupy_arrays_without_importing_cupy(
    obj: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert not CupyBridge().accepts_array(obj)
    assert "cupy" not in sys.modules


@pytest.mark.usefixtures("no_cupy")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_get_xp_of_a_cuda_device_without_cupy_names_the_extra(device: str) -> None:
    with pytest.raises(ImportError, match=rf"get_xp\(\) .* needs CuPy: {INSTALL_HINT}"):
        interop.get_xp(torch.device(device))


def test_cpu_paths_are_unchanged_with_the_bridge_installed() -> None:
    array = numpy.arange(3.0)
    tensor = interop.from_ndarray(array)
    assert interop.as_ndarray(tensor) is not None
    assert interop.get_xp(tensor) is numpy
    with pytest.raises(ValueError, match="got meta"):
        interop.get_xp(torch.device("meta"))


# ---------------------------------------------------------------- with a GPU

GPU_DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_from_ndarray_shares_memory_with_cupy_arrays(dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    array = cupy.zeros((2, 3), dtype=dtype)
    tensor = interop.from_ndarray(array)
    assert tensor.device.type == "cuda"
    assert tensor.dtype is interop.from_numpy_dtype(dtype)
    tensor[1, 2] = 1
    assert bool(array[1, 2] == 1)
    array[0, 0] = 1
    assert tensor[0, 0].item() == 1


@pytest.mark.gpu
def test_from_ndarray_copies_cupy_arrays_with_negative_strides() -> None:
    cupy = pytest.importorskip("cupy")
    base = cupy.arange(12, dtype=cupy.int32).reshape(3, 4)
    tensor = interop.from_ndarray(base[::-1, ::2])
    assert tensor.cpu().tolist() == [[8, 10], [4, 6], [0, 2]]
    tensor.fill_(0)
    assert int(base.sum()) == 66


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_as_ndarray_shares_memory_with_cuda_tensors(dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    tensor = torch.zeros(2, 3, dtype=interop.from_numpy_dtype(dtype), device="cuda")
    array = interop.as_ndarray(tensor)
    assert isinstance(array, cupy.ndarray)
    assert array.dtype == numpy.dtype(dtype)
    array[1, 2] = 1
    assert tensor[1, 2].item() == 1


@pytest.mark.gpu
def test_as_ndarray_of_cuda_tensor_keeps_strides_and_detaches() -> None:
    cupy = pytest.importorskip("cupy")
    weight = torch.arange(12.0, device="cuda").reshape(3, 4).requires_grad_()
    view = weight.t()
    array = interop.as_ndarray(view)
    assert array.strides == tuple(s * 4 for s in view.stride())
    numpy.testing.assert_array_equal(cupy.asnumpy(array), view.detach().cpu().numpy())
    array[0, 0] = -1
    assert weight[0, 0].item() == -1


@pytest.mark.gpu
def test_as_ndarray_of_cuda_bfloat16_is_a_clear_error() -> None:
    pytest.importorskip("cupy")
    with pytest.raises(TypeError, match=r"NumPy has no dtype equivalent to torch.bfloat16"):
        interop.as_ndarray(torch.zeros(2, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.gpu
def test_get_xp_returns_cupy_for_cuda_objects() -> None:
    cupy = pytest.importorskip("cupy")
    assert interop.get_xp(torch.zeros(1, device="cuda")) is cupy
    assert interop.get_xp(torch.device("cuda")) is cupy
    assert interop.get_xp(cupy.zeros(1)) is cupy
