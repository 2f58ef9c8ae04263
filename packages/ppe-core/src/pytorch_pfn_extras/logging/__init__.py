"""Loggers of PPE and of applications built on it: children of the ``"ppe"`` logger.

The level constants are the standard library's (``ppe.logging.INFO is logging.INFO``), so
``get_logger("app").setLevel(ppe.logging.DEBUG)`` needs no second import.
"""

from __future__ import annotations

from logging import CRITICAL, DEBUG, ERROR, INFO, WARNING

from pytorch_pfn_extras.logging._logger import get_logger

__all__ = [
    "CRITICAL",
    "DEBUG",
    "ERROR",
    "INFO",
    "WARNING",
    "get_logger",
]
