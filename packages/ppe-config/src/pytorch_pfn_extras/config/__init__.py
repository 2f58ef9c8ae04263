"""Lazily evaluated configuration with substitution and references."""

from __future__ import annotations

__all__: list[str] = []
