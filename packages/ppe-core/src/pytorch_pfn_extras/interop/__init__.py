"""Conversion between tensors and NumPy/CuPy ndarrays, and between their dtypes.

NumPy arrays and CPU tensors are handled here. CuPy arrays and CUDA tensors go
through an array bridge found via the ``pytorch_pfn_extras.interop_bridges``
entry point group; ``ppe-runtime-cuda`` provides one
(``pip install "ppe-runtime-cuda[cupy]"``).
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
    "register_bridge",
    "reload_bridges",
    "unregister_bridge",
]
