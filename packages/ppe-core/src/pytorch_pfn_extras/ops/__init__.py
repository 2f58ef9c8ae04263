"""Custom operators with a forward and a backward implementation, registered in ``torch.library``.

``register(name, fwd_op, bwd_op)`` defines ``torch.ops.ppe.<name>``: an operator that autograd
differentiates with the given backward, that meta and fake tensors (``torch.compile``,
``torch.export``, ``ppe.compile``) trace with the given shape functions, and that compiled graphs
keep as a single node.
"""

from __future__ import annotations

from pytorch_pfn_extras.ops.register import OpDesc, register

__all__ = [
    "OpDesc",
    "register",
]
