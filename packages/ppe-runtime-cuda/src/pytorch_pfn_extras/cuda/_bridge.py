"""The CuPy array bridge used by ``pytorch_pfn_extras.interop`` (zero-copy via DLPack)."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import torch
from torch.utils.dlpack import from_dlpack

from pytorch_pfn_extras.cuda._cupy import import_cupy
from pytorch_pfn_extras.interop import as_numpy_dtype


class CupyBridge:
    """Converts between CUDA tensors and CuPy arrays without copying.

    ``ppe-runtime-cuda`` declares it in the ``pytorch_pfn_extras.interop_bridges``
    entry point group, so ``from_ndarray``, ``as_ndarray`` and ``get_xp`` use it
    automatically. Register it by hand with
    ``pytorch_pfn_extras.interop.register_bridge(CupyBridge())`` only where
    package metadata is unavailable (frozen applications). CuPy itself is
    imported only when a conversion needs it.
    """

    def accepts_array(self, obj: object) -> bool:
        """Return whether ``obj`` is a CuPy array (never imports CuPy)."""
        cupy = sys.modules.get("cupy")
        return cupy is not None and isinstance(obj, cupy.ndarray)

    def accepts_device(self, device: torch.device) -> bool:
        """Return whether ``device`` is a CUDA device."""
        return device.type == "cuda"

    def from_ndarray(self, ndarray: Any) -> torch.Tensor:
        """Return a CUDA tensor sharing memory with the CuPy array ``ndarray``.

        Arrays whose strides PyTorch cannot express (negative, or not a
        multiple of the item size) are copied first.
        """
        itemsize = ndarray.itemsize
        if any(s < 0 or s % itemsize for s in ndarray.strides):
            ndarray = sys.modules["cupy"].ascontiguousarray(ndarray)
        return from_dlpack(ndarray)

    def as_ndarray(self, tensor: torch.Tensor) -> Any:
        """Return a CuPy array sharing memory with the CUDA tensor ``tensor``."""
        as_numpy_dtype(tensor.dtype)  # TypeError where CuPy has no such dtype
        if tensor.layout != torch.strided:
            message = (
                f"as_ndarray() needs a dense (torch.strided) tensor, got layout "
                f"{tensor.layout}; call tensor.to_dense() first"
            )
            raise TypeError(message)
        if tensor.is_conj() or tensor.is_neg():
            message = (
                "as_ndarray() cannot share memory with a tensor whose conjugate or negative "
                "bit is set (a lazy view); call tensor.resolve_conj().resolve_neg() first"
            )
            raise ValueError(message)
        cupy = import_cupy("as_ndarray() of a CUDA tensor")
        return cupy.from_dlpack(tensor.detach())

    def get_xp(self, obj: Any) -> ModuleType:
        """Return the ``cupy`` module (for a CuPy array or a CUDA device)."""
        return import_cupy("get_xp() of a CUDA device or CuPy array")

    def __eq__(self, other: object) -> bool:
        # Stateless: every instance is the same bridge (no duplicates when a
        # user registers one and the entry point provides another).
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return "CupyBridge()"
