"""CUDA streams and memory pools shared with CuPy, and the CuPy array bridge.

CuPy is optional (``pip install "ppe-runtime-cuda[cupy]"``) and imported only
when a feature needs it.
"""

from __future__ import annotations

from pytorch_pfn_extras.cuda._bridge import CupyBridge
from pytorch_pfn_extras.cuda._mempool import use_default_mempool_in_cupy, use_torch_mempool_in_cupy
from pytorch_pfn_extras.cuda._stream import stream

__all__ = [
    "CupyBridge",
    "stream",
    "use_default_mempool_in_cupy",
    "use_torch_mempool_in_cupy",
]
