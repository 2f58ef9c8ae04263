"""Mapping between PyTorch and NumPy dtypes."""

from __future__ import annotations

from typing import Any

import numpy
import torch

# The dtypes that both libraries have, in a stable order (used in error messages).
_PAIRS: tuple[tuple[torch.dtype, type[numpy.generic]], ...] = (
    (torch.bool, numpy.bool_),
    (torch.uint8, numpy.uint8),
    *(
        # torch.uint16/32/64 exist from PyTorch 2.3 on.
        (getattr(torch, name), getattr(numpy, name))
        for name in ("uint16", "uint32", "uint64")
        if isinstance(getattr(torch, name, None), torch.dtype)
    ),
    (torch.int8, numpy.int8),
    (torch.int16, numpy.int16),
    (torch.int32, numpy.int32),
    (torch.int64, numpy.int64),
    (torch.float16, numpy.float16),
    (torch.float32, numpy.float32),
    (torch.float64, numpy.float64),
    (torch.complex64, numpy.complex64),
    (torch.complex128, numpy.complex128),
)

TO_NUMPY: dict[torch.dtype, type[numpy.generic]] = dict(_PAIRS)

# Keyed by (kind, itemsize) so that byte order and platform aliases
# (``numpy.longlong`` vs ``numpy.int64``) map to the same PyTorch dtype.
FROM_NUMPY: dict[tuple[str, int], torch.dtype] = {
    (numpy.dtype(np_type).kind, numpy.dtype(np_type).itemsize): torch_dtype
    for torch_dtype, np_type in _PAIRS
}

# Fast path for the common inputs (scalar types and native dtypes); a hit is always
# right because these keys only compare equal to specs of the very same dtype.
_FROM_NUMPY_EXACT: dict[Any, torch.dtype] = {
    key: torch_dtype for torch_dtype, np_type in _PAIRS for key in (np_type, numpy.dtype(np_type))
}

SUPPORTED_DTYPES = ", ".join(str(torch_dtype).removeprefix("torch.") for torch_dtype, _ in _PAIRS)


def as_numpy_dtype(torch_dtype: torch.dtype) -> Any:
    """Return the NumPy type for the given PyTorch dtype.

    Args:
        torch_dtype: PyTorch's dtype object, e.g. ``torch.float32``.

    Returns:
        NumPy type object, e.g. ``numpy.float32`` (it compares equal to
        ``numpy.dtype("float32")``).

    Raises:
        TypeError: ``torch_dtype`` is not a ``torch.dtype``, or NumPy has no
            equivalent (``torch.bfloat16``, ``torch.complex32``, float8 and
            quantized dtypes).

    Example:
        >>> as_numpy_dtype(torch.float16)
        <class 'numpy.float16'>
    """
    if not isinstance(torch_dtype, torch.dtype):
        message = (
            f"as_numpy_dtype() expects a torch.dtype, got {type(torch_dtype).__name__} "
            f"{torch_dtype!r}"
        )
        raise TypeError(message)
    np_type = TO_NUMPY.get(torch_dtype)
    if np_type is None:
        message = (
            f"as_numpy_dtype(): NumPy has no dtype equivalent to {torch_dtype}; "
            f"supported dtypes are {SUPPORTED_DTYPES} (convert the tensor first, "
            "e.g. tensor.float())"
        )
        raise TypeError(message)
    return np_type


def from_numpy_dtype(numpy_dtype: Any) -> torch.dtype:
    """Return the PyTorch dtype for the given NumPy dtype.

    Args:
        numpy_dtype: NumPy's dtype object, or anything ``numpy.dtype()`` accepts
            (``numpy.float32``, ``"float32"``, ``"<f4"``, ``float``). Byte order
            is ignored: ``">f4"`` gives ``torch.float32``.

    Returns:
        PyTorch type object, e.g. ``torch.float32``.

    Raises:
        TypeError: ``numpy_dtype`` is not a NumPy dtype, or PyTorch has no
            equivalent (``longdouble``, strings, objects, datetimes, records).

    Example:
        >>> from_numpy_dtype(numpy.dtype("int16"))
        torch.int16
    """
    try:
        return _FROM_NUMPY_EXACT[numpy_dtype]
    except (KeyError, TypeError):  # TypeError: unhashable specs (record field lists)
        pass
    if numpy_dtype is None or isinstance(numpy_dtype, torch.dtype):
        # numpy.dtype(None) silently means float64; a torch.dtype is a mix-up.
        message = (
            f"from_numpy_dtype() expects a NumPy dtype, got {type(numpy_dtype).__name__} "
            f"{numpy_dtype!r}"
        )
        raise TypeError(message)
    try:
        dtype = numpy.dtype(numpy_dtype)
    except (TypeError, ValueError) as exc:
        message = (
            f"from_numpy_dtype() expects a NumPy dtype, got {type(numpy_dtype).__name__} "
            f"{numpy_dtype!r} ({exc})"
        )
        raise TypeError(message) from exc
    torch_dtype = FROM_NUMPY.get((dtype.kind, dtype.itemsize))
    if torch_dtype is None:
        message = (
            f"from_numpy_dtype(): PyTorch has no dtype equivalent to NumPy's {dtype}; "
            f"supported dtypes are {SUPPORTED_DTYPES}"
        )
        raise TypeError(message)
    return torch_dtype
