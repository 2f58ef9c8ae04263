"""ProfileReport, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.profile_report import ProfileReport
    >>> manager.extend(ProfileReport(filename="profile.jsonl"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._profile_report import ProfileReport

__all__ = ["ProfileReport"]
