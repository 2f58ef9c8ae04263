"""``Ensure`` and ``ensure``, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.nn.modules.ensure_shape import ensure
    >>> ensure(torch.zeros(2, 3), shape=(None, 3))
"""

from __future__ import annotations

from pytorch_pfn_extras.nn._ensure import Ensure, ensure

__all__ = [
    "Ensure",
    "ensure",
]
