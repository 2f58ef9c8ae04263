"""Optuna search spaces as config types."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.config import Config

if TYPE_CHECKING:
    import optuna

OPTUNA_TYPE_NAMES = (
    "optuna_suggest_categorical",
    "optuna_suggest_discrete_uniform",
    "optuna_suggest_float",
    "optuna_suggest_int",
    "optuna_suggest_loguniform",
    "optuna_suggest_uniform",
)


def optuna_types(trial: optuna.trial.BaseTrial) -> dict[str, Callable[..., Any]]:
    """Config types that ask ``trial`` for a value.

    Each name takes the arguments of the optuna method it is named after:

    - ``optuna_suggest_categorical(name, choices)``
    - ``optuna_suggest_float(name, low, high, step=None, log=False)``
    - ``optuna_suggest_int(name, low, high, step=1, log=False)``
    - ``optuna_suggest_uniform(name, low, high)``: ``suggest_float(name, low, high)``
    - ``optuna_suggest_loguniform(name, low, high)``: ``suggest_float(..., log=True)``
    - ``optuna_suggest_discrete_uniform(name, low, high, q)``: ``suggest_float(..., step=q)``

    The last three are the search spaces of optuna's deprecated methods of the same names,
    expressed through ``suggest_float`` (the same distributions, without the deprecation
    warnings). Any trial works, including ``optuna.trial.FixedTrial(study.best_params)`` to
    rebuild the best config of a study.

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

    def optuna_suggest_categorical(name: str, choices: Sequence[Any]) -> Any:
        return trial.suggest_categorical(name, choices)

    def optuna_suggest_discrete_uniform(name: str, low: float, high: float, q: float) -> float:
        return trial.suggest_float(name, low, high, step=q)

    def optuna_suggest_float(
        name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        return trial.suggest_float(name, low, high, step=step, log=log)

    def optuna_suggest_int(name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return trial.suggest_int(name, low, high, step=step, log=log)

    def optuna_suggest_loguniform(name: str, low: float, high: float) -> float:
        return trial.suggest_float(name, low, high, log=True)

    def optuna_suggest_uniform(name: str, low: float, high: float) -> float:
        return trial.suggest_float(name, low, high)

    return {
        "optuna_suggest_categorical": optuna_suggest_categorical,
        "optuna_suggest_discrete_uniform": optuna_suggest_discrete_uniform,
        "optuna_suggest_float": optuna_suggest_float,
        "optuna_suggest_int": optuna_suggest_int,
        "optuna_suggest_loguniform": optuna_suggest_loguniform,
        "optuna_suggest_uniform": optuna_suggest_uniform,
    }


def load_path_with_optuna_types(
    path: str | os.PathLike[str],
    trial: optuna.trial.BaseTrial,
    loader: Callable[[str], Any] | None = None,
    types: Mapping[str, Callable[..., Any]] | None = None,
) -> Config:
    """``Config.load_path`` with the types of ``optuna_types(trial)`` added.

    Args:
        path: The config file (JSON, or YAML for ``.yaml``/``.yml``).
        trial: The trial that suggests the values.
        loader: As for ``Config.load_path``.
        types: Further types; ``types`` itself is not modified.

    Returns:
        The config; each ``optuna_suggest_*`` node asks ``trial`` when it is first evaluated.

    Raises:
        ValueError: ``types`` already defines one of the ``optuna_suggest_*`` names.

    Example:
        >>> def objective(trial):
        ...     config = load_path_with_optuna_types("search.yaml", trial, types=types)
        ...     return train(config["/model"], config["/optimizer"])
        >>> optuna.create_study().optimize(objective, n_trials=20)
    """
    merged: dict[str, Callable[..., Any]] = dict(types) if types is not None else {}
    clashes = sorted(set(merged) & set(OPTUNA_TYPE_NAMES))
    if clashes:
        message = (
            f"load_path_with_optuna_types: types already defines {', '.join(map(repr, clashes))}, "
            "which optuna_types(trial) provides; rename your type"
        )
        raise ValueError(message)
    merged.update(optuna_types(trial))
    return Config.load_path(path, loader=loader, types=merged)
