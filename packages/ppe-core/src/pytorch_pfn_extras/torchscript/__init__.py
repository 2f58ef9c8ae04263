"""Helpers for TorchScript graphs (``torch._C.Graph``): running JIT passes and finding in-place ops.

TorchScript is deprecated in recent PyTorch releases; these helpers serve code that still
inspects or rewrites scripted and traced graphs (ONNX export, custom device compilers).
"""

from __future__ import annotations

from pytorch_pfn_extras.torchscript._passes import find_inplace, run_jit_pass

__all__ = [
    "find_inplace",
    "run_jit_pass",
]
