"""Handlers and logics: the per-step training and evaluation code of the trainer engine."""

from __future__ import annotations

from pytorch_pfn_extras.handler._codeblock_logic import CodeBlockLogic
from pytorch_pfn_extras.handler._handler import BaseHandler, Handler
from pytorch_pfn_extras.handler._logic import ClousureLogic, Logic
from pytorch_pfn_extras.handler._logic_base import BaseLogic, torch_autocast
from pytorch_pfn_extras.runtime import CodeBlock, forward, update_parameters

__all__ = [
    "BaseHandler",
    "BaseLogic",
    "ClousureLogic",
    "CodeBlock",
    "CodeBlockLogic",
    "Handler",
    "Logic",
    "forward",
    "torch_autocast",
    "update_parameters",
]
