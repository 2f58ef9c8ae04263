"""What every snapshot extension shares with the code that makes one run (preemption)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

Filename = str | Callable[["ExtensionsManagerProtocol"], str]


class SnapshotExtension(Extension):
    """What every snapshot extension offers the code that forces one to run (preemption).

    Attributes:
        ran_at: The iteration at which the extension last ran (``-1``: never).
    """

    trigger: TriggerLike = (1, "epoch")
    priority = PRIORITY_SNAPSHOT
    needs_model_state = True
    ran_at = -1

    def wait_for_writes(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait until the snapshots written so far are complete (committed).

        Raises:
            Exception: A write failed.
        """
        raise NotImplementedError
