"""Type checks of argument values shared by ppe-dataset's modules."""

from __future__ import annotations

import numbers
from typing import TypeGuard

__all__ = ["is_integer"]


def is_integer(value: object) -> TypeGuard[numbers.Integral]:
    """Whether ``value`` is an integer (a Python or NumPy int) and not a boolean.

    ``bool`` subclasses ``int`` (``isinstance(True, int)`` holds), so row, key and cache indices
    and sizes check with this instead, and ``True`` is rejected as it should be. NumPy integers
    (``np.int64(3)``) and other registered :class:`numbers.Integral` types are integers;
    ``np.bool_``, floats and 0-d arrays or tensors are not. Callers convert with ``int()``.

    Example:
        >>> import numpy as np
        >>> is_integer(3), is_integer(np.int64(3)), is_integer(True), is_integer(3.0)
        (True, True, False, False)
    """
    if isinstance(value, int):  # the common case, without the ABC check below
        return not isinstance(value, bool)
    return isinstance(value, numbers.Integral)
