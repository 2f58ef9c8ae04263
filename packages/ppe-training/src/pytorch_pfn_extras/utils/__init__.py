"""Utilities: activation checkpointing and engine comparers."""

from __future__ import annotations

from pytorch_pfn_extras.utils import checkpoint, comparer

__all__ = ["checkpoint", "comparer"]
