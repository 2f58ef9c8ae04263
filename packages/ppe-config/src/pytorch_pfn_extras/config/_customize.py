"""``customize_type``: default arguments taken from the config by path."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

DEFAULTS_ATTR = "_ppe_config_default_kwargs"


def customize_type(**default_kwargs: str) -> Callable[[_F], _F]:
    """Decorate a type so that its missing arguments are read from the config by path.

    When a config node ``{type: Dataset, ...}`` omits an argument named here, the value is
    taken from the given path, exactly as if the node contained ``argument: '@<path>'``:
    absolute paths start at the root, relative ones at the node itself (so ``'../n_class'``
    is a sibling of the node). An argument written in the node wins over the default.
    Decorating a class applies to its subclasses too, unless they are decorated themselves.

    Args:
        **default_kwargs: Argument name to config path (a leading ``@`` is allowed).

    Returns:
        A decorator that returns the callable itself, annotated with the defaults.

    Raises:
        TypeError: A path is not a string.

    Example:
        >>> @customize_type(n_class="/n_class")
        ... class Dataset:
        ...     def __init__(self, n_class):
        ...         self.n_class = n_class
        >>> Config({"dataset": {"type": "Dataset"}, "n_class": 5},
        ...        {"Dataset": Dataset})["/dataset"].n_class
        5
    """
    for name, path in default_kwargs.items():
        if not isinstance(path, str):
            message = (
                f"customize_type: the default of argument {name!r} must be a config path "
                f"string such as '/n_class', got {path!r}"
            )
            raise TypeError(message)
    defaults = {name: path.removeprefix("@") for name, path in default_kwargs.items()}

    def decorator(fn: _F) -> _F:
        try:
            setattr(fn, DEFAULTS_ATTR, defaults)
        except (AttributeError, TypeError):
            message = (
                f"customize_type cannot annotate {fn!r} (a built-in or immutable callable); "
                "decorate a function or class that wraps it instead"
            )
            raise TypeError(message) from None
        return fn

    return decorator


def default_kwargs_of(fn: Callable[..., Any]) -> Mapping[str, str] | None:
    defaults: Mapping[str, str] | None = getattr(fn, DEFAULTS_ATTR, None)
    return defaults
