"""ONNX export with test cases and annotations."""

from __future__ import annotations

__all__: list[str] = []
