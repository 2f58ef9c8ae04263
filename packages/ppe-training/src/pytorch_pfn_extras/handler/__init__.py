"""Handlers and logics: the per-step training and evaluation code."""

from __future__ import annotations

__all__: list[str] = []
