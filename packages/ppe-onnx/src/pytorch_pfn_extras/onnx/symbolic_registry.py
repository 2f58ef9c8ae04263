"""Look up and register symbolic functions of the TorchScript-based ONNX exporter.

``domain`` ``""`` names the PyTorch operators (``aten``), as in PPE 0.9.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["get_registered_op", "is_registered_op", "register_op"]


def is_registered_op(opname: str, domain: str, version: int) -> bool:
    """Whether the exporter has a symbolic function for ``domain::opname`` at opset ``version``."""
    from pytorch_pfn_extras.onnx import _torch_onnx

    return _torch_onnx.is_registered_op(opname, domain, version)


def get_registered_op(opname: str, domain: str, version: int) -> Callable[..., Any]:
    """The symbolic function of ``domain::opname`` at opset ``version``; ``KeyError`` if none."""
    from pytorch_pfn_extras.onnx import _torch_onnx

    return _torch_onnx.get_registered_op(opname, domain, version)


def register_op(op_type: str, f: Callable[..., Any], domain: str, opset_version: int) -> None:
    """Register ``f(g, *inputs)`` as the symbolic function of ``domain::op_type``.

    It applies from ``opset_version`` on, and overrides the exporter's own function.
    """
    from pytorch_pfn_extras.onnx import _torch_onnx

    _torch_onnx.register_op(op_type, f, domain, opset_version)
