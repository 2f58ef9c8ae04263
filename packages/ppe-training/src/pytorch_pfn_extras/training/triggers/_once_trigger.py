"""OnceTrigger: fires once, at the first iteration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._trigger_util import Trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


class OnceTrigger(Trigger):
    """Trigger that fires only once, the first time it is evaluated.

    Args:
        call_on_resume: Fire once more after the run is resumed from a snapshot (the flag
            saying "already fired" is then not restored).

    Example:
        >>> manager.extend(report_hyperparameters, trigger=OnceTrigger())
    """

    def __init__(self, call_on_resume: bool = False) -> None:
        self._flag_first = True
        self._flag_resumed = call_on_resume
        self.call_on_resume = call_on_resume

    @property
    def finished(self) -> bool:
        """Whether the trigger will never fire again (its extension is then not initialized)."""
        return not (self._flag_first or self._flag_resumed)

    def __call__(self, manager: ExtensionsManagerProtocol) -> bool:
        """Fire the first time, then never again."""
        fire = self._flag_first or self._flag_resumed
        self._flag_first = False
        self._flag_resumed = False
        return fire

    def may_fire(self, iteration: int, epoch_length: int) -> bool:
        """Return whether the trigger has not fired yet."""
        return self._flag_first or self._flag_resumed

    def state_dict(self) -> dict[str, Any]:
        """Return ``{'flag_first': bool}``."""
        return {"flag_first": self._flag_first}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore whether the trigger has fired (it fires again if ``call_on_resume``)."""
        self._flag_first = bool(to_load.get("flag_first", True))
        self._flag_resumed = self.call_on_resume

    def __repr__(self) -> str:
        return f"OnceTrigger(call_on_resume={self.call_on_resume!r})"
