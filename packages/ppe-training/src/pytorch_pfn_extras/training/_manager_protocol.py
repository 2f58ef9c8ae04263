"""The manager as seen by extensions and triggers (a structural type)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from pytorch_pfn_extras.reporting import Reporter
    from pytorch_pfn_extras.writing import Writer


class ExtensionsManagerProtocol(Protocol):
    """What an extension or a trigger may use of the manager that calls it.

    Both :class:`~pytorch_pfn_extras.training.ExtensionsManager` and the Ignite manager satisfy
    it; write extensions against this protocol rather than a concrete class.
    """

    @property
    def iteration(self) -> int:
        """Number of completed iterations."""
        ...

    @property
    def epoch(self) -> int:
        """Number of completed epochs."""
        ...

    @property
    def epoch_detail(self) -> float:
        """Completed epochs, fractional (``iteration / iters_per_epoch``)."""
        ...

    @property
    def iters_per_epoch(self) -> int:
        """Number of iterations in one epoch."""
        ...

    @property
    def is_before_training(self) -> bool:
        """True until the first iteration completes."""
        ...

    @property
    def elapsed_time(self) -> float:
        """Seconds of training so far (continues across resumes)."""
        ...

    @property
    def models(self) -> Mapping[str, torch.nn.Module]:
        """The models by name."""
        ...

    @property
    def raw_models(self) -> Mapping[str, torch.nn.Module]:
        """The models by name, before ``transform_model``."""
        ...

    @property
    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        """The optimizers by name."""
        ...

    @property
    def out(self) -> str:
        """The output directory."""
        ...

    @property
    def observation(self) -> dict[str, Any]:
        """Values reported during the current (or last) iteration."""
        ...

    @property
    def reporter(self) -> Reporter:
        """The manager's reporter."""
        ...

    @property
    def writer(self) -> Writer | None:
        """The writer extensions use to write files into :attr:`out`."""
        ...

    @property
    def stop_trigger(self) -> bool:
        """Whether training has finished."""
        ...

    def request_stop(self, reason: str, *, preempted: bool = False) -> None:
        """End training after the running iteration, whatever the stop trigger says.

        ``preempted=True`` says that the job is being stopped from outside: the next
        ``run_iteration()`` after the stop ends the process with ``SystemExit(0)``.
        """
        ...

    def get_extension(self, name: str) -> Any:
        """Return the extension registered under ``name``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Return the state of the training loop."""
        ...

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        ...


@runtime_checkable
class StateObjectProtocol(Protocol):
    """What the manager needs of a state object (a scheduler, a grad scaler, a wrapper...):
    ``state_dict()`` and ``load_state_dict(state_dict)``, saved in snapshots under
    ``state_objects``.

    Example:
        >>> isinstance(torch.optim.lr_scheduler.StepLR(optimizer, 1), StateObjectProtocol)
        True
    """

    def state_dict(self) -> dict[str, Any]:
        """Return the object's state (tensors, numbers, strings, lists and dicts)."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        ...
