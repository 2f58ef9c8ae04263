"""Zero-copy conversion between tensors and ndarrays, and array-module lookup."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy
import torch

from pytorch_pfn_extras.interop._bridge import INSTALL_HINT, active_bridges
from pytorch_pfn_extras.interop._dtype import SUPPORTED_DTYPES, TO_NUMPY


def _type_name(obj: object) -> str:
    cls = type(obj)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _looks_like_cupy(obj: object) -> bool:
    return type(obj).__module__.partition(".")[0] == "cupy"


def _native_copy(ndarray: numpy.ndarray[Any, Any]) -> numpy.ndarray[Any, Any]:
    # A new C-contiguous, writable, native-byte-order array: what torch.from_numpy accepts.
    return numpy.array(ndarray, dtype=ndarray.dtype.newbyteorder("="), order="C", copy=True)


def _unsupported_dtype(dtype: numpy.dtype[Any]) -> TypeError:
    message = (
        f"from_ndarray(): PyTorch has no dtype for a numpy.ndarray of dtype {dtype}; "
        f"supported dtypes are {SUPPORTED_DTYPES}"
    )
    return TypeError(message)


def _numpy_to_tensor(ndarray: numpy.ndarray[Any, Any]) -> torch.Tensor:
    if ndarray.flags.writeable:
        try:
            return torch.from_numpy(ndarray)
        except TypeError as exc:
            raise _unsupported_dtype(ndarray.dtype) from exc
        except ValueError:
            # Negative strides, strides not a multiple of the item size, or a
            # non-native byte order: PyTorch cannot view such memory, so copy.
            pass
    # Also for read-only memory, which PyTorch cannot honour: a copy keeps the array intact.
    try:
        return torch.from_numpy(_native_copy(ndarray))
    except TypeError as exc:
        raise _unsupported_dtype(ndarray.dtype) from exc


def from_ndarray(ndarray: Any) -> torch.Tensor:
    """Create a ``torch.Tensor`` from a ``numpy.ndarray`` or ``cupy.ndarray``.

    The tensor shares memory with the array where PyTorch can describe it.
    Unlike ``torch.from_numpy``, this function makes a copy when needed: for
    arrays with negative strides (``a[::-1]``), strides that are not a multiple
    of the item size (a field of a record array), a non-native byte order, or
    read-only memory. CuPy arrays need ``ppe-runtime-cuda`` (zero-copy through
    DLPack).

    Args:
        ndarray: A NumPy array, or a CuPy array when ``ppe-runtime-cuda`` is
            installed.

    Returns:
        A tensor on the array's device (CPU for NumPy).

    Raises:
        TypeError: ``ndarray`` is not an array, or its dtype has no PyTorch
            equivalent.
        ImportError: ``ndarray`` is a CuPy array but no bridge for it is
            installed.

    Example:
        >>> a = numpy.arange(3, dtype=numpy.float32)
        >>> t = from_ndarray(a)
        >>> t[0] = 10
        >>> a
        array([10.,  1.,  2.], dtype=float32)
    """
    if isinstance(ndarray, numpy.ndarray):
        return _numpy_to_tensor(ndarray)
    for bridge in active_bridges():
        if bridge.accepts_array(ndarray):
            return bridge.from_ndarray(ndarray)
    if _looks_like_cupy(ndarray):
        message = (
            f"from_ndarray() got a {_type_name(ndarray)}; CuPy arrays need the CuPy "
            f"bridge: {INSTALL_HINT}"
        )
        raise ImportError(message)
    if isinstance(ndarray, torch.Tensor):
        message = "from_ndarray() expects a numpy.ndarray or cupy.ndarray, got a torch.Tensor"
        raise TypeError(message)
    message = (
        f"from_ndarray() expects a numpy.ndarray or cupy.ndarray, got {_type_name(ndarray)} "
        "(use torch.as_tensor() for lists and scalars)"
    )
    raise TypeError(message)


def _view_error(tensor: torch.Tensor, exc: Exception) -> Exception:
    if tensor.dtype not in TO_NUMPY:
        message = (
            f"as_ndarray(): NumPy has no dtype equivalent to {tensor.dtype}; supported "
            f"dtypes are {SUPPORTED_DTYPES} (convert first, e.g. tensor.float())"
        )
        return TypeError(message)
    if tensor.layout != torch.strided:
        message = (
            f"as_ndarray() needs a dense (torch.strided) tensor, got layout {tensor.layout}; "
            "call tensor.to_dense() first"
        )
        return TypeError(message)
    if tensor.is_conj() or tensor.is_neg():
        bit, fix = (
            ("conjugate", "resolve_conj") if tensor.is_conj() else ("negative", "resolve_neg")
        )
        message = (
            f"as_ndarray() cannot share memory with a tensor whose {bit} bit is set (a lazy "
            f"view); call tensor.{fix}() first, which copies"
        )
        return ValueError(message)
    message = f"as_ndarray() cannot convert this tensor: {exc}"
    return ValueError(message)


def _device_error(caller: str, device: torch.device) -> Exception:
    if device.type == "cuda":
        message = (
            f"{caller} got a CUDA device ({device}); CUDA tensors convert to CuPy through "
            f"the CuPy bridge: {INSTALL_HINT}"
        )
        return ImportError(message)
    message = (
        f"{caller} supports the cpu device (NumPy) and cuda (CuPy, with ppe-runtime-cuda), "
        f"got {device}"
    )
    return ValueError(message)


def as_ndarray(tensor: torch.Tensor) -> Any:
    """Create a ``numpy.ndarray`` or ``cupy.ndarray`` from a ``torch.Tensor``.

    The result is a NumPy array for a CPU tensor and a CuPy array for a CUDA
    tensor (with ``ppe-runtime-cuda``). The tensor and the array share the same
    memory: changes to one are visible in the other. Changes made through the
    array are not tracked by autograd (a tensor that requires grad is detached).

    Args:
        tensor: A dense CPU or CUDA tensor.

    Returns:
        An ndarray sharing memory with ``tensor``.

    Raises:
        TypeError: ``tensor`` is not a tensor, is sparse, or its dtype has no
            NumPy equivalent (``torch.bfloat16``).
        ValueError: The tensor is a lazy conjugate/negative view, or lives on a
            device other than CPU or CUDA.
        ImportError: The tensor is on CUDA but no bridge for it is installed.

    Example:
        >>> t = torch.zeros(3)
        >>> a = as_ndarray(t)
        >>> a[1] = 5
        >>> t
        tensor([0., 5., 0.])
    """
    if not isinstance(tensor, torch.Tensor):
        message = f"as_ndarray() expects a torch.Tensor, got {_type_name(tensor)}"
        raise TypeError(message)
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.is_cpu:
        try:
            return tensor.numpy()
        except (TypeError, RuntimeError) as exc:
            raise _view_error(tensor, exc) from exc
    device = tensor.device
    for bridge in active_bridges():
        if bridge.accepts_device(device):
            return bridge.as_ndarray(tensor)
    raise _device_error("as_ndarray()", device)


def get_xp(obj: Any) -> ModuleType:
    """Return the ndarray module (``numpy`` or ``cupy``) for ``obj``.

    Args:
        obj: A ``torch.Tensor``, a ``torch.device``, or a NumPy/CuPy array.

    Returns:
        ``numpy`` for CPU tensors and devices and NumPy arrays; ``cupy`` for
        CUDA tensors and devices and CuPy arrays (with ``ppe-runtime-cuda``).

    Raises:
        TypeError: ``obj`` is none of the above.
        ValueError: ``obj`` is on a device other than CPU or CUDA.
        ImportError: ``obj`` is on CUDA or is a CuPy array, but no bridge for
            it (or CuPy itself) is installed.

    Example:
        >>> get_xp(torch.zeros(2)) is numpy
        True
    """
    if isinstance(obj, (numpy.ndarray, numpy.generic)):
        return numpy
    if isinstance(obj, torch.Tensor):
        if obj.is_cpu:
            return numpy
        device = obj.device
    elif isinstance(obj, torch.device):
        device = obj
    else:
        for bridge in active_bridges():
            if bridge.accepts_array(obj):
                return bridge.get_xp(obj)
        if _looks_like_cupy(obj):
            message = (
                f"get_xp() got a {_type_name(obj)}; CuPy arrays need the CuPy bridge: "
                f"{INSTALL_HINT}"
            )
            raise ImportError(message)
        message = (
            "get_xp() expects a torch.Tensor, a torch.device or a NumPy/CuPy array, "
            f"got {_type_name(obj)}"
        )
        raise TypeError(message)
    if device.type == "cpu":
        return numpy
    for bridge in active_bridges():
        if bridge.accepts_device(device):
            return bridge.get_xp(device)
    raise _device_error("get_xp()", device)
