"""The Slack extensions, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.slack import SlackWebhook
    >>> manager.extend(SlackWebhook(url, msg="Epoch {manager.epoch}: loss {loss:.3f}"))
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._slack import Slack, SlackWebhook

__all__ = [
    "Slack",
    "SlackWebhook",
]
