"""Types for configs, such as optuna search spaces."""

from __future__ import annotations

__all__: list[str] = []
