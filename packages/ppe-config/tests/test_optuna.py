"""config_types: optuna search spaces in configs, driven by real optuna studies."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras.config import Config, ConfigError
from pytorch_pfn_extras.config_types import load_path_with_optuna_types, optuna_types

# optuna requires NumPy: an environment that proves ppe-config runs without NumPy cannot have it.
optuna = pytest.importorskip("optuna", reason="the optuna extra is not installed")

NAMES = [
    "optuna_suggest_categorical",
    "optuna_suggest_discrete_uniform",
    "optuna_suggest_float",
    "optuna_suggest_int",
    "optuna_suggest_loguniform",
    "optuna_suggest_uniform",
]

SEARCH_SPACE = {
    "x": {"type": "optuna_suggest_uniform", "name": "x", "low": -4.0, "high": 4.0},
    "y": {"type": "optuna_suggest_int", "name": "y", "low": -3, "high": 3},
    "scale": {"type": "optuna_suggest_loguniform", "name": "scale", "low": 0.5, "high": 2.0},
    "offset": {
        "type": "optuna_suggest_discrete_uniform",
        "name": "offset",
        "low": 0.0,
        "high": 1.0,
        "q": 0.25,
    },
    "shape": {"type": "optuna_suggest_categorical", "name": "shape", "choices": ["bowl", "flat"]},
    "lr": {"type": "optuna_suggest_float", "name": "lr", "low": 1e-3, "high": 1.0, "log": True},
    "objective": {
        "type": "objective",
        "x": "@/x",
        "y": "@/y",
        "scale": "@/scale",
        "offset": "@/offset",
        "shape": "@/shape",
        "lr": "@/lr",
    },
}


def objective_value(x: float, y: int, scale: float, offset: float, shape: str, lr: float) -> float:
    bowl = (x - 1.0) ** 2 + (y + 2) ** 2
    return scale * (bowl if shape == "bowl" else bowl + 5.0) + offset + lr


def run_study(path: Path, storage: str | None, n_trials: int) -> optuna.Study:
    study = optuna.create_study(
        storage=storage, sampler=optuna.samplers.RandomSampler(seed=0), study_name="config"
    )

    def objective(trial: optuna.Trial) -> float:
        config = load_path_with_optuna_types(path, trial, types={"objective": objective_value})
        value: float = config["/objective"]
        return value

    study.optimize(objective, n_trials=n_trials)
    return study


# SEARCH_SPACE uses optuna's deprecated kinds: optuna_types gives optuna's own methods, which warn
DEPRECATED = pytest.mark.filterwarnings("ignore:suggest_.* has been deprecated:FutureWarning")


@DEPRECATED
@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_a_study_optimises_an_objective_read_from_a_config_file(
    tmp_path: Path, storage: str
) -> None:
    path = tmp_path / "search.json"
    path.write_text(json.dumps(SEARCH_SPACE), encoding="utf-8")
    url = None if storage == "memory" else f"sqlite:///{tmp_path / 'study.db'}"
    n_trials = 25 if url is None else 8
    study = run_study(path, url, n_trials=n_trials)
    assert len(study.trials) == n_trials
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
    for trial in study.trials:
        params = trial.params
        assert set(params) == {"x", "y", "scale", "offset", "shape", "lr"}
        assert -4.0 <= params["x"] <= 4.0
        assert params["y"] in range(-3, 4)
        assert 0.5 <= params["scale"] <= 2.0
        assert params["offset"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert params["shape"] in ("bowl", "flat")
        assert trial.value == pytest.approx(objective_value(**params))
    assert study.best_value == min(t.value for t in study.trials if t.value is not None)
    if url is not None:  # the trials are in the database, readable by another process
        loaded = optuna.load_study(study_name="config", storage=url)
        assert loaded.best_params == study.best_params


@DEPRECATED
def test_a_fixed_trial_rebuilds_the_best_config(tmp_path: Path) -> None:
    path = tmp_path / "search.json"
    path.write_text(json.dumps(SEARCH_SPACE), encoding="utf-8")
    study = run_study(path, None, n_trials=10)
    best = load_path_with_optuna_types(
        path, optuna.trial.FixedTrial(study.best_params), types={"objective": objective_value}
    )
    assert best["/objective"] == pytest.approx(study.best_value)


def test_each_suggestion_is_asked_once_even_when_referenced_twice() -> None:
    study = optuna.create_study()
    trial = study.ask()
    config = Config(
        {
            "lr": {"type": "optuna_suggest_float", "name": "lr", "low": 0.1, "high": 1.0},
            "a": "@/lr",
            "b": "@/lr",
        },
        optuna_types(trial),
    )
    assert config["/a"] == config["/b"] == trial.params["lr"]
    assert list(trial.params) == ["lr"]


def test_the_optimizer_type_itself_can_be_searched() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        types = {
            **optuna_types(trial),
            "SGD": lambda lr: ("SGD", lr),
            "Adam": lambda lr: ("Adam", lr),
        }
        tree = {
            "optimizer": {
                "type": {
                    "type": "optuna_suggest_categorical",
                    "name": "optimizer",
                    "choices": ["SGD", "Adam"],
                },
                "lr": 0.1,
            }
        }
        name, lr = Config(tree, types)["/optimizer"]
        assert (name, lr) == (trial.params["optimizer"], 0.1)
        seen.add(name)
        study.tell(trial, 0.0)
    assert seen == {"SGD", "Adam"}


@pytest.mark.parametrize("make_trial", ["ask", "fixed"])
def test_optuna_types_are_the_trials_own_suggest_methods(make_trial: str) -> None:
    trial = optuna.create_study().ask() if make_trial == "ask" else optuna.trial.FixedTrial({})
    types = optuna_types(trial)
    assert sorted(types) == NAMES
    for name, fn in types.items():
        method = name.removeprefix("optuna_")
        assert fn == getattr(trial, method), name  # the bound method of this very trial
        assert fn.__self__ is trial  # type: ignore[attr-defined]
        assert fn.__func__ is getattr(type(trial), method)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("deprecated", "kwargs"),
    [
        ("suggest_uniform", {"low": 0.1, "high": 0.9}),
        ("suggest_loguniform", {"low": 0.1, "high": 0.9}),
        ("suggest_discrete_uniform", {"low": 0.0, "high": 1.0, "q": 0.25}),
    ],
)
def test_deprecated_names_are_optunas_methods_with_a_fallback_for_trials_without_them(
    deprecated: str, kwargs: dict[str, Any]
) -> None:
    """A trial without the deprecated method (an optuna that removed it) gets the same search
    space through ``suggest_float``, without a warning."""

    class NewTrial:  # a trial-like object with only the current methods
        def __init__(self, trial: Any) -> None:
            self.suggest_categorical = trial.suggest_categorical
            self.suggest_float = trial.suggest_float
            self.suggest_int = trial.suggest_int

    study = optuna.create_study()
    old_trial, new_trial = study.ask(), study.ask()
    node = {"p": {"type": f"optuna_{deprecated}", "name": "p", **kwargs}}
    with pytest.warns(FutureWarning, match=f"{deprecated} has been deprecated"):
        old = Config(node, optuna_types(old_trial))["/p"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = Config(node, optuna_types(NewTrial(new_trial)))["/p"]  # type: ignore[arg-type]
    assert new_trial.distributions["p"] == old_trial.distributions["p"]
    assert kwargs["low"] <= min(old, new) <= max(old, new) <= kwargs["high"]


def test_load_path_with_optuna_types_replaces_same_named_types(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "n: {type: optuna_suggest_int, name: n, low: 1, high: 3}\nm: {type: mine}\n",
        encoding="utf-8",
    )
    types = {"optuna_suggest_int": lambda **kwargs: "shadowed", "mine": lambda: "mine"}
    with pytest.warns(
        UserWarning, match=r"^optuna_suggest_int is overwritten by optuna suggest\.$"
    ):
        config = load_path_with_optuna_types(path, optuna.trial.FixedTrial({"n": 2}), types=types)
    assert (config["/n"], config["/m"]) == (2, "mine")
    assert list(types) == ["optuna_suggest_int", "mine"]  # the caller's dict is left alone
    assert types["optuna_suggest_int"]() == "shadowed"


def test_load_path_with_optuna_types_warns_once_for_each_optuna_type_it_overwrites(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"n": {"type": "optuna_suggest_int", "name": "n", "low": 1, "high": 3}})
    )
    types = {
        "optuna_suggest_float": lambda **kwargs: "shadowed",
        "optuna_suggest_int": lambda **kwargs: "shadowed",
        "optuna_suggest_integer": lambda **kwargs: "not an optuna type",
        "mine": lambda: "mine",
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_path_with_optuna_types(path, optuna.trial.FixedTrial({"n": 3}), types=types)
    assert [(w.category, str(w.message)) for w in caught] == [
        (UserWarning, "optuna_suggest_float is overwritten by optuna suggest."),
        (UserWarning, "optuna_suggest_int is overwritten by optuna suggest."),
    ]
    assert {w.filename for w in caught} == {__file__}  # points at the caller
    assert config["/n"] == 3


def test_load_path_with_optuna_types_does_not_modify_the_given_types(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "n: {type: optuna_suggest_int, name: n, low: 1, high: 3}\nm: {type: mine}\n",
        encoding="utf-8",
    )
    types = {"mine": lambda: "mine"}
    config = load_path_with_optuna_types(path, optuna.trial.FixedTrial({"n": 2}), types=types)
    assert (config["/n"], config["/m"]) == (2, "mine")
    assert list(types) == ["mine"]


def test_a_suggestion_outside_its_range_names_the_config_path() -> None:
    config = Config(
        {"p": {"type": "optuna_suggest_int", "name": "p", "low": 5, "high": 1}},
        optuna_types(optuna.create_study().ask()),
    )
    with pytest.raises(
        ValueError, match=r"^/p: type 'optuna_suggest_int' \(.*suggest_int\) .* raised ValueError"
    ) as info:
        config["/p"]
    assert isinstance(info.value, ConfigError)
    assert isinstance(info.value.__cause__, ValueError)
