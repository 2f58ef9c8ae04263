"""The extension API (``ppe.training.extension.Extension`` and friends)."""

from __future__ import annotations

from pytorch_pfn_extras.training._extension import (
    PRIORITY_EDITOR,
    PRIORITY_READER,
    PRIORITY_SNAPSHOT,
    PRIORITY_WRITER,
    Extension,
    ExtensionEntry,
    ExtensionLike,
    make_extension,
)

__all__ = [
    "PRIORITY_EDITOR",
    "PRIORITY_READER",
    "PRIORITY_SNAPSHOT",
    "PRIORITY_WRITER",
    "Extension",
    "ExtensionEntry",
    "ExtensionLike",
    "make_extension",
]
