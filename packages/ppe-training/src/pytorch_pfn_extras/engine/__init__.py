"""High-level trainer and evaluator built on handlers and runtimes."""

from __future__ import annotations

__all__: list[str] = []
