"""Training loops: the extensions manager, extensions and triggers."""

from __future__ import annotations

__all__: list[str] = []
