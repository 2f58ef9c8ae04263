"""The lazy-module machinery, at PPE's public module path.

Subclass :class:`LazyInitializationMixin` to write a module that creates parameters at
its first forward; they are :class:`UninitializedParameter` until then.

Example:
    >>> from pytorch_pfn_extras.nn.modules.lazy import (
    ...     LazyInitializationMixin,
    ...     UninitializedParameter,
    ... )
    >>> class LazyScale(LazyInitializationMixin, torch.nn.Module):
    ...     lazy_parameter_names = ("scale",)
    ...
    ...     def forward(self, x):
    ...         if isinstance(self.scale, UninitializedParameter):
    ...             self.scale = torch.nn.Parameter(torch.ones(x.shape[-1]))
    ...         return x * self.scale
"""

from __future__ import annotations

from pytorch_pfn_extras.nn._lazy import LazyInitializationMixin, UninitializedParameter

__all__ = [
    "LazyInitializationMixin",
    "UninitializedParameter",
]
