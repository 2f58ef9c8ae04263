"""What every snapshot extension shares with the code that makes one run (preemption)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training._snapshots._comm import Comm
    from pytorch_pfn_extras.writing import Writer

Filename = str | Callable[["ExtensionsManagerProtocol"], str]


@dataclasses.dataclass(frozen=True)
class SnapshotOptions:
    """The options every snapshot mode has, as ``snapshot()`` was given them."""

    target: Any
    filename: Filename
    condition: Callable[[], bool] | None
    writer: Writer | None
    n_retains: int
    autoload: bool
    saver_rank: int | None


class SnapshotExtension(Extension):
    """What every snapshot extension offers the code that forces one to run (preemption).

    Attributes:
        saved_at: The iteration of the last snapshot this extension saved (``-1``: none);
            a run at which ``condition`` returned false saved nothing. On a rank that does
            not write (``saver_rank``), the iteration of the last one it took part in.
    """

    trigger: TriggerLike = (1, "epoch")
    priority = PRIORITY_SNAPSHOT
    needs_model_state = True
    saved_at = -1

    def __init__(self, options: SnapshotOptions) -> None:
        """Keep the options every mode has (``snapshot()`` checked them)."""
        self._target = options.target
        self._filename = options.filename
        self._condition = options.condition
        self._writer = options.writer
        self._n_retains = options.n_retains
        self.autoload = options.autoload
        self.loads_state = options.autoload
        self._saver_rank = options.saver_rank
        self._comm: Comm | None = None  # the ranks of the run, where several take part
        self._out = ""
        self.resumed_from: str | None = None

    def save(self, manager: ExtensionsManagerProtocol) -> None:
        """Save a snapshot now, whatever ``condition`` and the trigger say (a preemption's).

        An extension that the manager did not initialize (its trigger had finished when
        training started) is set up first, without autoloading. With several ranks, every
        rank calls it at the same iteration.

        Raises:
            Exception: The save failed (an asynchronous one may fail later, in
                :meth:`wait_for_writes`).
        """
        raise NotImplementedError

    def wait_for_writes(self, manager: ExtensionsManagerProtocol) -> None:
        """Wait until the snapshots written so far are complete (committed).

        Raises:
            Exception: A write failed.
        """
        raise NotImplementedError
