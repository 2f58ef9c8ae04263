"""PPE's module paths under ``pytorch_pfn_extras.nn.modules``.

Each submodule re-exports what PPE defines there: ``ensure_shape`` (``Ensure``,
``ensure``), ``extended_sequential`` (``ExtendedSequential``), ``lazy``
(``LazyInitializationMixin``, ``UninitializedParameter``), ``lazy_linear``,
``lazy_conv`` and ``lazy_batchnorm`` (the lazy layers). New code imports from
``pytorch_pfn_extras.nn``.
"""

from __future__ import annotations

# Imported so that ``ppe.nn.modules.lazy`` works as an attribute, as in PPE.
from pytorch_pfn_extras.nn.modules import ensure_shape as ensure_shape
from pytorch_pfn_extras.nn.modules import extended_sequential as extended_sequential
from pytorch_pfn_extras.nn.modules import lazy as lazy
from pytorch_pfn_extras.nn.modules import lazy_batchnorm as lazy_batchnorm
from pytorch_pfn_extras.nn.modules import lazy_conv as lazy_conv
from pytorch_pfn_extras.nn.modules import lazy_linear as lazy_linear

__all__: list[str] = []
