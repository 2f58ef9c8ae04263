"""Type checks of Python values, public as ``pytorch_pfn_extras.interop.is_int``."""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["is_int"]


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool``.

    ``bool`` subclasses ``int`` (``isinstance(True, int)`` holds), so an argument that counts
    something (a size, a rank, a number of repeats) checks with this instead, and ``True`` is
    rejected as it should be. Subclasses of ``int`` other than ``bool`` (``IntEnum`` members)
    are ints; NumPy integers and 0-d tensors are not.

    Example:
        >>> is_int(3), is_int(True), is_int(3.0)
        (True, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool)
