"""Types for configs, such as optuna search spaces (optuna is imported only by its user)."""

from __future__ import annotations

from pytorch_pfn_extras.config_types._optuna import load_path_with_optuna_types, optuna_types

__all__ = [
    "load_path_with_optuna_types",
    "optuna_types",
]
