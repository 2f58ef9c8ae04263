"""Conversion between tensors and NumPy/CuPy ndarrays, and between their dtypes.

NumPy arrays and CPU tensors are handled here. CuPy arrays and CUDA tensors go
through an array bridge found via the ``pytorch_pfn_extras.interop_bridges``
entry point group; ``ppe-runtime-cuda`` provides one
(``pip install "ppe-runtime-cuda[cupy]"``).

:func:`is_int` tells a Python ``int`` from a ``bool``, a NumPy integer or a 0-d tensor, for
code that validates integer arguments the way PPE does.
"""

from __future__ import annotations

from pytorch_pfn_extras.interop._bridge import (
    BRIDGE_ENTRY_POINT_GROUP,
    ArrayBridge,
    bridges,
    register_bridge,
    reload_bridges,
    unregister_bridge,
)
from pytorch_pfn_extras.interop._checks import is_int
from pytorch_pfn_extras.interop._convert import as_ndarray, from_ndarray, get_xp
from pytorch_pfn_extras.interop._dtype import as_numpy_dtype, from_numpy_dtype

__all__ = [
    "BRIDGE_ENTRY_POINT_GROUP",
    "ArrayBridge",
    "as_ndarray",
    "as_numpy_dtype",
    "bridges",
    "from_ndarray",
    "from_numpy_dtype",
    "get_xp",
    "is_int",
    "register_bridge",
    "reload_bridges",
    "unregister_bridge",
]
