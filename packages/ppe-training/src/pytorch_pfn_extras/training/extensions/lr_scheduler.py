"""The LRScheduler extension, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.lr_scheduler import LRScheduler
    >>> manager.extend(LRScheduler(torch.optim.lr_scheduler.StepLR(optimizer, 10)))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._lr_scheduler import LRScheduler

__all__ = ["LRScheduler"]
