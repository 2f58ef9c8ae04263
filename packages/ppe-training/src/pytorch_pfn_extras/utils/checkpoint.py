"""Activation checkpointing that updates BatchNorm statistics once per forward."""

from __future__ import annotations

from pytorch_pfn_extras.utils._checkpoint import checkpoint

__all__ = ["checkpoint"]
