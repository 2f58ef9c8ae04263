"""Test utilities of PPE.

PPE 0.9 publishes this module path with no public names (its helpers are private to PPE's
own test suite); it exists here so that ``import pytorch_pfn_extras.testing`` keeps working.
"""

from __future__ import annotations

__all__: list[str] = []
