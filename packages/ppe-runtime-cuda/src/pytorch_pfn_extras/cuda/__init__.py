"""CUDA streams, CuPy memory pools and the CuPy bridge."""

from __future__ import annotations

__all__: list[str] = []
