"""observe_value and observe_lr: record a value into the observation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.distributed._collective import mean_over_ranks
from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._extension import PRIORITY_WRITER, make_extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


def _observe(
    observation_key: str,
    target_func: Callable[[ExtensionsManagerProtocol], Any],
    trigger: TriggerLike,
    default_name: str,
    distributed: bool = False,
) -> Callable[[ExtensionsManagerProtocol], None]:
    if not isinstance(observation_key, str) or not observation_key:
        message = f"observation_key must be a non-empty string, got {observation_key!r}"
        raise ValueError(message)
    if not callable(target_func):
        message = f"target_func must be callable as target_func(manager), got {target_func!r}"
        raise TypeError(message)
    get_trigger(trigger)  # a malformed trigger fails here, not at extend()

    @make_extension(trigger=trigger, default_name=default_name, priority=PRIORITY_WRITER)
    def observe(manager: ExtensionsManagerProtocol) -> None:
        value = target_func(manager)
        if distributed:
            value = mean_over_ranks(value, f"observe_value({observation_key!r}, distributed=True)")
        manager.reporter.report({observation_key: value})

    return observe


def observe_value(
    observation_key: str,
    target_func: Callable[[ExtensionsManagerProtocol], Any],
    *,
    distributed: bool = False,
) -> Callable[[ExtensionsManagerProtocol], None]:
    """Return an extension to continuously record a value.

    The extension reports ``target_func(manager)`` under ``observation_key`` into the
    manager's observation. It has the writer priority, so it runs before the readers of the
    same iteration (a :class:`~pytorch_pfn_extras.training.extensions.LogReport` logs the
    value). It is triggered each epoch by default; pass ``trigger=`` to
    :meth:`~pytorch_pfn_extras.training.ExtensionsManager.extend` to change that.

    With ``distributed=True`` the recorded value is the mean of ``target_func(manager)``
    (a number or a tensor) over every process of the default process group, the same on
    every rank: a stop trigger (``EarlyStoppingTrigger(monitor=observation_key)``) or a
    ``ReduceLROnPlateau`` stepped on it takes the same decision everywhere. It is a
    collective: every rank needs the extension, with the same trigger.

    Args:
        observation_key: Key of the observation to record.
        target_func: Function returning the value to record; it takes the manager.
        distributed: Record the mean over the ranks (keyword-only: PPE 0.9 has no such
            parameter).

    Returns:
        The extension.

    Raises:
        ValueError: ``observation_key`` is not a non-empty string.
        TypeError: ``target_func`` is not callable; with ``distributed``, (when called)
            it returned something other than a number or a tensor.

    Example:
        >>> manager.extend(extensions.observe_value("progress", lambda m: m.epoch_detail))
        >>> manager.extend(  # the loss of this rank's last batch, averaged over the ranks
        ...     extensions.observe_value(
        ...         "global/loss", lambda m: m.observation["loss"], distributed=True
        ...     ),
        ...     trigger=(1, "epoch"),
        ... )
    """
    return _observe(observation_key, target_func, (1, "epoch"), "observe_value", distributed)


def observe_lr(
    optimizer: torch.optim.Optimizer,
    param_group: int = 0,
    observation_key: str = "lr",
    *,
    trigger: TriggerLike = (1, "epoch"),
) -> Callable[[ExtensionsManagerProtocol], None]:
    """Return an extension to record the learning rate.

    The learning rate of one parameter group of ``optimizer`` is reported under
    ``observation_key`` (with the writer priority, see :func:`observe_value`).

    Args:
        optimizer: Optimizer whose learning rate is recorded.
        param_group: Index of the parameter group of the optimizer to observe.
        observation_key: Key of the observation to record.
        trigger: When to record it; each epoch by default (keyword-only: PPE 0.9 has no
            such parameter).

    Returns:
        The extension.

    Raises:
        TypeError: ``optimizer`` is not a ``torch.optim.Optimizer``.
        IndexError: The optimizer has no parameter group ``param_group``.

    Example:
        >>> manager.extend(extensions.observe_lr(optimizer), trigger=(1, "iteration"))
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        message = f"observe_lr needs a torch.optim.Optimizer, got {type(optimizer).__name__}"
        raise TypeError(message)
    n_groups = len(optimizer.param_groups)
    if not is_int(param_group):
        message = f"observe_lr: param_group must be an integer index, got {param_group!r}"
        raise TypeError(message)
    if not -n_groups <= param_group < n_groups:
        message = (
            f"observe_lr: param_group {param_group} is out of range; the optimizer has "
            f"{n_groups} parameter group(s)"
        )
        raise IndexError(message)

    def learning_rate(manager: ExtensionsManagerProtocol) -> Any:
        return optimizer.param_groups[param_group]["lr"]

    return _observe(observation_key, learning_rate, trigger, "observe_lr")
