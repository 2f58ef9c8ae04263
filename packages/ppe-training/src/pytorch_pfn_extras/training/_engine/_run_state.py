"""Where a training run stands: the one record of the iteration count and the epoch length."""

from __future__ import annotations

from pytorch_pfn_extras.training._trigger_checks import check_epoch_length


class RunState:
    """The iteration count and the epoch length of a run, and the epoch they give.

    Ignite's ``State`` is the model: every manager holds one, and what needs to know where
    training stands reads it there (the trainer, its handler's logic, the Ignite manager);
    only the loop that runs the iterations advances :attr:`iteration`.

    The epoch length is known from the start of a hand-written loop
    (``ExtensionsManager(iters_per_epoch=...)``); the trainer and the Ignite manager learn
    it from their data when the run begins (:meth:`begin`). Until then it is ``None``, and
    what derives from it raises instead of guessing.

    Args:
        epoch_length: Iterations per epoch, or ``None`` until the run begins.

    Raises:
        ValueError: ``epoch_length`` is not a positive integer.
    """

    __slots__ = ("epoch_length", "iteration")

    def __init__(self, epoch_length: int | None = None) -> None:
        self.iteration = 0
        """Completed iterations (restored from a snapshot before a resumed run begins)."""
        self.epoch_length = None if epoch_length is None else check_epoch_length(epoch_length)
        """Iterations per epoch; ``None`` until the run begins."""

    def begin(self, epoch_length: int) -> None:
        """Fix the epoch length when the run begins.

        Raises:
            ValueError: ``epoch_length`` is not a positive integer, or differs from the
                length of a run that already did iterations with another one.
        """
        epoch_length = check_epoch_length(epoch_length)
        known = self.epoch_length
        if known is not None and known != epoch_length and self.iteration:
            message = (
                f"the run has {epoch_length} iterations per epoch but the run already "
                f"started, at iteration {self.iteration}, had {known}; an epoch's length "
                "cannot change during training"
            )
            raise ValueError(message)
        self.epoch_length = epoch_length

    def known_epoch_length(self) -> int:
        """Return the epoch length.

        Raises:
            RuntimeError: The run has not begun, so the epoch length is not known yet.
        """
        epoch_length = self.epoch_length
        if epoch_length is None:
            message = (
                "the epoch length is not known before the run begins (the trainer takes it "
                "from its loader in run(), the Ignite manager from engine.run())"
            )
            raise RuntimeError(message)
        return epoch_length

    @property
    def epoch(self) -> int:
        """Completed epochs."""
        return self.iteration // self.known_epoch_length()

    @property
    def epoch_detail(self) -> float:
        """Completed epochs, with the fraction of the current one."""
        return self.iteration / self.known_epoch_length()

    def is_last_of_epoch(self, batch_idx: int) -> bool:
        """Whether the batch index ``batch_idx`` (from 0) is the last of an epoch."""
        return self.epoch_length is not None and batch_idx == self.epoch_length - 1

    def __repr__(self) -> str:
        return f"RunState(iteration={self.iteration}, epoch_length={self.epoch_length})"
