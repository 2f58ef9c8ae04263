"""TimelineTrace, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.timeline_trace import TimelineTrace
    >>> manager.extend(TimelineTrace(filename="trace.json"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._timeline_trace import TimelineTrace

__all__ = ["TimelineTrace"]
