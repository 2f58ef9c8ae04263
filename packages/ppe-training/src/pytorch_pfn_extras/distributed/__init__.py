"""Helpers for distributed training."""

from __future__ import annotations

__all__: list[str] = []
