"""A stream context shared by PyTorch and CuPy."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Generator

import torch

from pytorch_pfn_extras.cuda._cupy import optional_cupy


@contextlib.contextmanager
def stream(stream: torch.cuda.Stream | None) -> Generator[None, None, None]:
    """Context manager that makes ``stream`` the current CUDA stream.

    Like ``torch.cuda.stream()``, it also makes the stream's device current.
    When CuPy is available, CuPy's current stream (and device) switch to the
    same CUDA stream too, so kernels from both libraries are ordered on it.
    Without CuPy it behaves exactly like ``torch.cuda.stream()``.

    Args:
        stream: The stream to select. ``None`` makes this a no-op.

    Raises:
        TypeError: ``stream`` is neither a ``torch.cuda.Stream`` nor ``None``.

    Example:
        >>> s = torch.cuda.Stream()
        >>> with ppe.cuda.stream(s):
        ...     y = model(x)  # PyTorch and CuPy work both run on ``s``
    """
    if stream is None:
        yield
        return
    if not isinstance(stream, torch.cuda.Stream):
        message = (
            f"stream() expects a torch.cuda.Stream or None, got {type(stream).__name__} {stream!r}"
        )
        raise TypeError(message)
    cupy = optional_cupy()
    with torch.cuda.stream(stream):
        if cupy is None:
            yield
            return
        device_index = stream.device_index
        with warnings.catch_warnings():
            # CuPy 14 deprecates ExternalStream for Stream.from_external (which wants the
            # CUDA stream protocol); the handle of a torch stream works with both.
            warnings.simplefilter("ignore", DeprecationWarning)
            external = cupy.cuda.ExternalStream(stream.cuda_stream, device_index)
        with cupy.cuda.Device(device_index), external:
            yield
