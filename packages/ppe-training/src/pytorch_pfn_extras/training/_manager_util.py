"""Argument checks and helpers of the managers."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from pytorch_pfn_extras.training._manager_protocol import StateObjectProtocol

ModelsLike = torch.nn.Module | Mapping[str, torch.nn.Module]
OptimizersLike = torch.optim.Optimizer | Mapping[str, torch.optim.Optimizer]
TransformModel = Callable[[str, torch.nn.Module], torch.nn.Module]


def _by_name(
    value: Any,
    what: str,
    check_item: Callable[[Any, str], None],
    error: type[Exception] = TypeError,
) -> dict[str, Any] | None:
    """The named forms: a mapping of names to items (each checked), or ``[]`` (none); ``None``
    for a single item.

    Raises:
        error: A key that is not a string; what ``check_item`` raises.
    """
    if isinstance(value, Mapping):
        result = dict(value)
        for name, item in result.items():
            if not isinstance(name, str):
                message = f"{what} must be keyed by strings, got the key {name!r}"
                raise error(message)
            check_item(item, f"{what}[{name!r}]")
        return result
    if isinstance(value, (list, tuple)) and not value:
        return {}  # ``optimizers=[]`` in the reference docs' example
    return None


def as_dict(value: Any, what: str, kind: type) -> dict[str, Any]:
    """The ``kind`` objects by name: one (named ``"main"``), a mapping, or ``[]``.

    Raises:
        ValueError: Anything else (PPE's exception type for bad ``models``).
    """

    def check_item(item: Any, where: str) -> None:
        if not isinstance(item, kind):
            message = f"{where} must be a {kind.__name__}, got {type(item).__name__}"
            raise ValueError(message)

    named = _by_name(value, what, check_item, ValueError)
    if named is not None:
        return named
    if isinstance(value, kind):
        return {"main": value}
    message = (
        f"{what} must be a {kind.__name__} or a mapping of names to {kind.__name__}, "
        f"got {type(value).__name__}"
    )
    raise ValueError(message)


OPTIMIZER_METHODS = ("state_dict", "load_state_dict")


def check_optimizer(
    optimizer: Any, where: str, methods: tuple[str, ...] = OPTIMIZER_METHODS
) -> None:
    """Check that ``optimizer`` has the optimizer ``methods`` used (duck typing: wrappers from
    other libraries need not subclass ``torch.optim.Optimizer``).

    Raises:
        TypeError: A method is missing; the message names it.
    """
    missing = [name for name in methods if not callable(getattr(optimizer, name, None))]
    if missing:
        names = ", ".join(f"{name}()" for name in missing)
        message = (
            f"{where} ({type(optimizer).__name__}) is not an optimizer: it has no {names} "
            "(an optimizer needs state_dict() and load_state_dict() to be saved, and "
            "zero_grad() and step() to be stepped)"
        )
        raise TypeError(message)


def as_optimizers(value: Any) -> dict[str, Any]:
    """The optimizers by name: one optimizer (named ``"main"``), a mapping, or ``[]``.

    Any object with ``state_dict()`` and ``load_state_dict()`` is accepted as an optimizer.

    Raises:
        TypeError: A key that is not a string, or an object without those methods.
    """
    named = _by_name(value, "optimizers", check_optimizer)
    if named is not None:
        return named
    if not all(callable(getattr(value, name, None)) for name in OPTIMIZER_METHODS):
        message = (
            "optimizers must be an optimizer (an object with state_dict() and "
            "load_state_dict()) or a mapping of names to optimizers, got "
            f"{type(value).__name__}"
        )
        raise TypeError(message)
    return {"main": value}


def check_state_objects(state_objects: Mapping[str, Any] | None) -> dict[str, Any]:
    if state_objects is None:
        return {}
    if not isinstance(state_objects, Mapping):
        message = (
            "state_objects must be a mapping of names to objects with state_dict() and "
            f"load_state_dict(), got {type(state_objects).__name__}"
        )
        raise TypeError(message)
    for name, obj in state_objects.items():
        if not isinstance(obj, StateObjectProtocol):
            message = (
                f"state_objects[{name!r}] ({type(obj).__name__}) must have state_dict() "
                "and load_state_dict()"
            )
            raise TypeError(message)
    return dict(state_objects)


def load_matching(kind: str, mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> None:
    """Load ``theirs[name]`` into each ``mine[name]`` (``load_state_dict``) present in both.

    A name on one side only is reported with a warning naming it: state missing from the
    snapshot starts from its initial value, state of what is no longer registered is ignored.
    """
    added, removed = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
    if added:
        message = (
            f"the snapshot has no state for the {kind} {added} (added after the snapshot was "
            "taken?); they start from their initial state"
        )
        warnings.warn(message, UserWarning, stacklevel=4)
    if removed:
        message = (
            f"the snapshot has state for the {kind} {removed}, which are not registered "
            "(removed since the snapshot was taken?); their state is ignored"
        )
        warnings.warn(message, UserWarning, stacklevel=4)
    for name, obj in mine.items():
        if name in theirs:
            obj.load_state_dict(theirs[name])
