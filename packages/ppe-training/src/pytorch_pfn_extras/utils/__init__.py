"""Utilities: activation checkpointing and engine comparers."""

from __future__ import annotations

__all__: list[str] = []
