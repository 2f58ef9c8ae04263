"""Preemption: what ``PreemptionHandler`` (``training/extensions/_preemption.py``) owns
(private; the public name is ``pytorch_pfn_extras.training.extensions.PreemptionHandler``).

Modules, each with one job:

- ``_signals``: the signal handlers (the first signal sets a flag, repeats are counted or
  escalated by policy), installed, restored, or kept until the process exits;
- ``_agreement``: the ranks' agreement on where to stop (non-blocking exchanges, and a last
  blocking one when training ends);
- ``_requeue``: requeueing the job (Slurm's ``scontrol requeue``, or a command given).
"""

from __future__ import annotations

import logging

logger = logging.getLogger("pytorch_pfn_extras.training.extensions.preemption")
"""The logger of every message about preemption."""
