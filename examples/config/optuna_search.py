"""A small optuna search of the digits classifier's hyper-parameters, read from a config.

Every trial loads ``examples/config/digits_search.yaml`` (which imports ``digits.yaml``, the
main job's config) with ``load_path_with_optuna_types``: the config's ``optuna_suggest_*``
nodes ask the trial for the hidden width, dropout, optimizer class, learning rate, weight decay
and batch size. The trial trains a small MLP on the embedded digits for a few epochs and
returns the validation accuracy; optuna prunes trials that fall behind. At the end, the best
trial's config is rebuilt with ``optuna.trial.FixedTrial`` and printed.

Usage::

    python examples/config/optuna_search.py [--trials 8] [--storage sqlite:///study.db]
        [--set /training/epochs 2 ...]

Needs torch and optuna (``pip install "pytorch-pfn-extras[optuna,yaml]"``); about 10 s on one
CPU core.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import time
from typing import Any

import optuna
import torch
import torch.nn.functional as F

from pytorch_pfn_extras.config import Config
from pytorch_pfn_extras.config_types import load_path_with_optuna_types

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "digits.csv.gz"


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The embedded digits: (float32 images scaled to [0, 1], int64 labels)."""
    with gzip.open(DATA, "rt") as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    table = torch.tensor(rows)
    return table[:, :-1] / 16.0, table[:, -1].long()


def mlp(in_features: int, hidden: list[int], n_classes: int, dropout: float) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for width in hidden:
        layers += [torch.nn.Linear(in_features, width), torch.nn.ReLU(), torch.nn.Dropout(dropout)]
        in_features = width
    layers.append(torch.nn.Linear(in_features, n_classes))
    return torch.nn.Sequential(*layers)


# The types of digits.yaml (see its header), shared with examples/train_digits.py.
TYPES: dict[str, Any] = {
    "MLP": mlp,
    "parameters": lambda module: list(module.parameters()),
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
}


def train(config: Config, data: tuple[torch.Tensor, ...], trial: optuna.Trial | None) -> float:
    """Train the config's model and optimizer; return the final validation accuracy."""
    train_x, train_y, val_x, val_y = data
    torch.manual_seed(config["/training/seed"])
    model, optimizer = config["/model"], config["/optimizer"]
    batch_size = config["/training/batch_size"]
    accuracy = 0.0
    for epoch in range(config["/training/epochs"]):
        model.train()
        for index in torch.randperm(len(train_x)).split(batch_size):
            optimizer.zero_grad()
            F.cross_entropy(model(train_x[index]), train_y[index]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(val_x).argmax(1) == val_y).float().mean().item()
        if trial is not None:
            trial.report(accuracy, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned
    return accuracy


def main(argv: list[str] | None = None) -> optuna.Study:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--storage", default=None, help="e.g. sqlite:///study.db (default: memory)")
    parser.add_argument("--config", default=str(HERE / "digits_search.yaml"))
    parser.add_argument(
        "--set", nargs=2, action="append", default=[], metavar=("PATH", "VALUE"),
        help="override a config value, e.g. --set /training/epochs 2",
    )  # fmt: skip
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # a tiny model: one thread is fastest
    images, labels = load_digits()
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    n_val = len(images) // 5
    val, train_ = order[:n_val], order[n_val:]
    data = (images[train_], labels[train_], images[val], labels[val])

    def load(trial: optuna.trial.BaseTrial) -> Config:
        config = load_path_with_optuna_types(args.config, trial, types=TYPES)
        config.update_via_args(args.set)
        return config

    def objective(trial: optuna.Trial) -> float:
        return train(load(trial), data, trial)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        storage=args.storage,
        sampler=optuna.samplers.TPESampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
    )
    start = time.perf_counter()
    study.optimize(objective, n_trials=args.trials)
    for trial in study.trials:
        value = "pruned" if trial.value is None else f"{trial.value:.3f}"
        print(f"trial {trial.number}: accuracy {value:>6}  {json.dumps(trial.params)}")
    best = load(optuna.trial.FixedTrial(study.best_params))
    print(f"best: trial {study.best_trial.number}, accuracy {study.best_value:.3f} "
          f"({len(study.trials)} trials in {time.perf_counter() - start:.1f} s)")  # fmt: skip
    print("best model:", best["/model"])
    print("best optimizer:", type(best["/optimizer"]).__name__, best["/optimizer"].defaults["lr"])
    return study


if __name__ == "__main__":
    main()
