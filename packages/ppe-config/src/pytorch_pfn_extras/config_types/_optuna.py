"""Optuna search spaces as config types."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.config import Config

if TYPE_CHECKING:
    import optuna


def optuna_types(trial: optuna.trial.BaseTrial) -> dict[str, Callable[..., Any]]:
    """Config types that ask ``trial`` for a value: its own ``suggest_*`` methods.

    ``types["optuna_suggest_int"]`` is ``trial.suggest_int`` (the bound method), and so on for
    each name; a node takes the arguments of the method it is named after:

    - ``optuna_suggest_categorical(name, choices)``
    - ``optuna_suggest_float(name, low, high, step=None, log=False)``
    - ``optuna_suggest_int(name, low, high, step=1, log=False)``
    - ``optuna_suggest_uniform(name, low, high)``
    - ``optuna_suggest_loguniform(name, low, high)``
    - ``optuna_suggest_discrete_uniform(name, low, high, q)``

    The last three are optuna's deprecated methods (they warn when called, as they do in
    optuna); for a trial without them (an optuna that removed them, a trial-like object), they
    are the same search spaces expressed through ``suggest_float``. Any trial works, including
    ``optuna.trial.FixedTrial(study.best_params)`` to rebuild the best config of a study.

    Args:
        trial: The trial that suggests the values.

    Returns:
        A dict to pass as (or merge into) the ``types`` of a ``Config``.

    Example:
        >>> config = Config(
        ...     {"lr": {"type": "optuna_suggest_float", "name": "lr", "low": 1e-4,
        ...             "high": 1e-1, "log": True}},
        ...     optuna_types(trial),
        ... )
        >>> lr = config["/lr"]
    """
    fallback = _deprecated_methods(trial)
    return {
        "optuna_suggest_categorical": trial.suggest_categorical,
        "optuna_suggest_discrete_uniform": fallback["suggest_discrete_uniform"],
        "optuna_suggest_float": trial.suggest_float,
        "optuna_suggest_int": trial.suggest_int,
        "optuna_suggest_loguniform": fallback["suggest_loguniform"],
        "optuna_suggest_uniform": fallback["suggest_uniform"],
    }


def _deprecated_methods(trial: optuna.trial.BaseTrial) -> dict[str, Callable[..., float]]:
    """optuna's deprecated ``suggest_*`` methods of ``trial``; those it lacks are written as
    ``suggest_float`` calls of the same search space."""

    def suggest_discrete_uniform(name: str, low: float, high: float, q: float) -> float:
        return trial.suggest_float(name, low, high, step=q)

    def suggest_loguniform(name: str, low: float, high: float) -> float:
        return trial.suggest_float(name, low, high, log=True)

    def suggest_uniform(name: str, low: float, high: float) -> float:
        return trial.suggest_float(name, low, high)

    written = (suggest_discrete_uniform, suggest_loguniform, suggest_uniform)
    return {fn.__name__: getattr(trial, fn.__name__, fn) for fn in written}


def load_path_with_optuna_types(
    path: str | os.PathLike[str],
    trial: optuna.trial.BaseTrial,
    loader: Callable[[str], Any] | None = None,
    types: Mapping[str, Callable[..., Any]] | None = None,
) -> Config:
    """``Config.load_path`` with the types of ``optuna_types(trial)`` added.

    The optuna types take the place of entries of ``types`` with the same names, as in PPE, so
    one ``types`` dict may serve several trials; each one replaced warns, as in PPE
    (``UserWarning: optuna_suggest_int is overwritten by optuna suggest.``).

    Args:
        path: The config file (JSON, or YAML for ``.yaml``/``.yml``).
        trial: The trial that suggests the values.
        loader: As for ``Config.load_path``.
        types: Further types; ``types`` itself is not modified.

    Returns:
        The config; each ``optuna_suggest_*`` node asks ``trial`` when it is first evaluated.

    Warns:
        UserWarning: For each name of ``types`` that an optuna type replaces.

    Example:
        >>> def objective(trial):
        ...     config = load_path_with_optuna_types("search.yaml", trial, types=types)
        ...     return train(config["/model"], config["/optimizer"])
        >>> optuna.create_study().optimize(objective, n_trials=20)
    """
    merged: dict[str, Callable[..., Any]] = dict(types) if types is not None else {}
    for name, suggest in optuna_types(trial).items():
        if name in merged:
            warnings.warn(f"{name} is overwritten by optuna suggest.", UserWarning, stacklevel=2)
        merged[name] = suggest
    return Config.load_path(path, loader=loader, types=merged)
