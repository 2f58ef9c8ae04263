"""``annotate``, ``apply_annotation``, ``scoped_anchor`` and ``init_annotate``."""

from __future__ import annotations

from pytorch_pfn_extras.onnx._annotation import (
    annotate,
    apply_annotation,
    init_annotate,
    scoped_anchor,
)

__all__ = ["annotate", "apply_annotation", "init_annotate", "scoped_anchor"]
