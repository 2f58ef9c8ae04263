"""Device runtimes: ``ppe.to``, ``ppe.map``, ``ppe.compile``, the runtime registry and CodeBlocks."""

from __future__ import annotations

from pytorch_pfn_extras.runtime._api import map, to
from pytorch_pfn_extras.runtime._base import BaseRuntime
from pytorch_pfn_extras.runtime._batch import call_with_batch
from pytorch_pfn_extras.runtime._code_block import CodeBlock, forward, update_parameters
from pytorch_pfn_extras.runtime._compile import compile
from pytorch_pfn_extras.runtime._pytorch import PyTorchRuntime
from pytorch_pfn_extras.runtime._registry import runtime_registry
from pytorch_pfn_extras.runtime._tags import get_runtime, named_runtime_modules

__all__ = [
    "BaseRuntime",
    "CodeBlock",
    "PyTorchRuntime",
    "call_with_batch",
    "compile",
    "forward",
    "get_runtime",
    "map",
    "named_runtime_modules",
    "runtime_registry",
    "to",
    "update_parameters",
]
