"""``pytorch_pfn_extras.cuda``: streams and memory pools shared with CuPy."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import cuda

INSTALL_HINT = r'pip install "ppe-runtime-cuda\[cupy\]"'


def test_importing_the_package_imports_neither_cupy_nor_anything_heavy() -> None:
    code = (
        "import sys, pytorch_pfn_extras.cuda; "
        "heavy = {'cupy', 'torch._dynamo'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names() -> None:
    assert set(cuda.__all__) == {
        "CupyBridge",
        "stream",
        "use_default_mempool_in_cupy",
        "use_torch_mempool_in_cupy",
    }


def test_stream_none_is_a_no_op_context() -> None:
    entered = False
    with cuda.stream(None):
        entered = True
    assert entered
    with pytest.raises(KeyError, match="propagates"), cuda.stream(None):
        raise KeyError("propagates")


@pytest.mark.parametrize(
    "bad", ["default", 0, torch.device("cuda"), object()], ids=lambda bad: type(bad).__name__
)
def test_stream_rejects_objects_that_are_not_torch_streams(bad: Any) -> None:
    expected = rf"expects a torch.cuda.Stream or None, got {type(bad).__name__}"
    with pytest.raises(TypeError, match=expected), cuda.stream(bad):
        pytest.fail("the body must not run")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_use_torch_mempool_in_cupy_without_cuda_says_cuda_is_unavailable() -> None:
    with pytest.raises(RuntimeError, match=r"needs CUDA, but torch.cuda.is_available\(\) is False"):
        cuda.use_torch_mempool_in_cupy()


@pytest.mark.usefixtures("no_cupy")
def test_use_default_mempool_in_cupy_without_cupy_names_the_extra() -> None:
    with pytest.raises(
        ImportError, match=rf"use_default_mempool_in_cupy\(\) needs CuPy: {INSTALL_HINT}"
    ):
        cuda.use_default_mempool_in_cupy()


# ---------------------------------------------------------------- with a GPU


@pytest.mark.gpu
def test_stream_switches_torch_and_cupy_to_the_same_stream() -> None:
    cupy = pytest.importorskip("cupy")
    side = torch.cuda.Stream()
    torch_before = torch.cuda.current_stream()
    cupy_before = cupy.cuda.get_current_stream().ptr
    with cuda.stream(side):
        assert torch.cuda.current_stream() == side
        assert cupy.cuda.get_current_stream().ptr == side.cuda_stream
        x = cupy.arange(10) * 2
        y = torch.ones(10, device="cuda") * 3
    side.synchronize()
    assert torch.cuda.current_stream() == torch_before
    assert cupy.cuda.get_current_stream().ptr == cupy_before
    assert int(x.sum()) == 90
    assert y.sum().item() == 30


@pytest.mark.gpu
@pytest.mark.usefixtures("no_cupy")
def test_stream_without_cupy_behaves_like_torch_cuda_stream() -> None:
    side = torch.cuda.Stream()
    with cuda.stream(side):
        assert torch.cuda.current_stream() == side
    assert torch.cuda.current_stream() != side


@pytest.mark.gpu
def test_torch_mempool_in_cupy_allocates_from_pytorch_then_default_pool_again() -> None:
    cupy = pytest.importorskip("cupy")
    size = 8 << 20
    try:
        cuda.use_torch_mempool_in_cupy()
        before = torch.cuda.memory_allocated()
        array = cupy.zeros(size, dtype=cupy.uint8)
        assert torch.cuda.memory_allocated() >= before + size
        array += 1
        assert int(array.sum()) == size
        del array
        assert torch.cuda.memory_allocated() < before + size
    finally:
        cuda.use_default_mempool_in_cupy()
    before = torch.cuda.memory_allocated()
    pool = cupy.get_default_memory_pool()
    array = cupy.zeros(size, dtype=cupy.uint8)
    assert torch.cuda.memory_allocated() == before
    assert pool.used_bytes() >= size
    del array


@pytest.mark.gpu
def test_torch_mempool_in_cupy_honours_ppe_streams() -> None:
    cupy = pytest.importorskip("cupy")
    side = torch.cuda.Stream()
    try:
        cuda.use_torch_mempool_in_cupy()
        with cuda.stream(side):
            array = cupy.ones(1000, dtype=cupy.float32)
            total = float(array.sum())
        assert total == 1000.0
    finally:
        cuda.use_default_mempool_in_cupy()


@pytest.mark.gpu
@pytest.mark.usefixtures("no_cupy")
def test_use_torch_mempool_in_cupy_without_cupy_names_the_extra() -> None:
    with pytest.raises(ImportError, match=INSTALL_HINT):
        cuda.use_torch_mempool_in_cupy()
