"""Choosing the memory pool CuPy allocates from."""

from __future__ import annotations

import sys

import torch

from pytorch_pfn_extras.cuda._cupy import import_cupy, require_cuda


def _torch_malloc(size: int, device_id: int) -> int:
    cupy = sys.modules["cupy"]
    # Allocate on CuPy's current stream, the one ppe.cuda.stream() selected.
    stream_ptr = cupy.cuda.get_current_stream().ptr
    return int(torch.cuda.caching_allocator_alloc(size, device_id, stream_ptr))


def _torch_free(mem_ptr: int, device_id: int) -> None:
    torch.cuda.caching_allocator_delete(mem_ptr)  # type: ignore[no-untyped-call]


def use_torch_mempool_in_cupy() -> None:
    """Make CuPy allocate from PyTorch's CUDA caching allocator.

    Both libraries then share one pool, so memory CuPy frees is reusable by
    PyTorch and vice versa. If you combine this with non-default CUDA streams,
    create and manage the streams with PyTorch (``torch.cuda.Stream()`` and
    `pytorch_pfn_extras.cuda.stream`).

    Raises:
        RuntimeError: CUDA is not available to PyTorch.
        ImportError: CuPy is not installed.

    Example:
        >>> ppe.cuda.use_torch_mempool_in_cupy()
        >>> a = cupy.ones(1024)  # counted by torch.cuda.memory_allocated()
    """
    require_cuda("use_torch_mempool_in_cupy()")
    cupy = import_cupy("use_torch_mempool_in_cupy()")
    allocator = cupy.cuda.memory.PythonFunctionAllocator(_torch_malloc, _torch_free)
    cupy.cuda.set_allocator(allocator.malloc)


def use_default_mempool_in_cupy() -> None:
    """Make CuPy allocate from its own default memory pool again.

    Raises:
        ImportError: CuPy is not installed.

    Example:
        >>> ppe.cuda.use_default_mempool_in_cupy()
    """
    cupy = import_cupy("use_default_mempool_in_cupy()")
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
