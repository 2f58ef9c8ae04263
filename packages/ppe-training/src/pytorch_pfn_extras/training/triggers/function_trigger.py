"""FunctionTrigger, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.triggers.function_trigger import FunctionTrigger
    >>> stop = FunctionTrigger(os.path.exists, ["STOP"], trigger=(10, "iteration"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.triggers._function_trigger import FunctionTrigger

__all__ = [
    "FunctionTrigger",
]
