"""The ``"ppe"`` logger, configured from the environment on first use (never at import)."""

from __future__ import annotations

import logging
import os
import threading
import warnings

_ROOT_NAME = "ppe"
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_lock = threading.Lock()
_configured = False


def _parse_level(value: str) -> int:
    name = value.strip().upper()
    if name in _LEVELS:
        level: int = getattr(logging, name)
        return level
    message = (
        f"PPE_LOG_LEVEL={value!r} is not a logging level (expected one of "
        f"{', '.join(_LEVELS)}); falling back to INFO"
    )
    warnings.warn(message, UserWarning, stacklevel=4)
    return logging.INFO


def _configure() -> None:
    """Configure the ``"ppe"`` logger once, from ``PPE_LOG_LEVEL`` and ``PPE_LOG_FILENAME``."""
    global _configured
    with _lock:
        if _configured:
            return
        logger = logging.getLogger(_ROOT_NAME)
        logger.setLevel(_parse_level(os.environ.get("PPE_LOG_LEVEL", "ERROR")))
        filename = os.environ.get("PPE_LOG_FILENAME")
        if filename:
            handler = logging.FileHandler(filename, delay=True, encoding="utf-8")
            handler.setFormatter(logging.Formatter(_FORMAT))
            logger.addHandler(handler)
        _configured = True


def get_logger(name: str) -> logging.Logger:
    """Return a child of the ``"ppe"`` logger, to be used by applications and PPE modules.

    The ``"ppe"`` logger is configured on the first call, never at import, and the root logger
    is never touched: records propagate to the root logger's handlers as usual. Two environment
    variables control it:

    - ``PPE_LOG_LEVEL``: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` (the default) or
      ``CRITICAL``; an invalid value falls back to ``INFO`` with a warning.
    - ``PPE_LOG_FILENAME``: also write the records to this file.

    Args:
        name: Name of the child logger (``"ppe.<name>"``).

    Returns:
        The logger ``"ppe.<name>"``.

    Raises:
        ValueError: ``name`` is empty.

    Example:
        >>> logger = get_logger("training")
        >>> logger.name
        'ppe.training'
        >>> logger.error("snapshot %s is truncated", "snapshot_iter_100")  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name:
        message = f"logger name must be a non-empty string, got {name!r}"
        raise ValueError(message)
    if not _configured:
        _configure()
    return logging.getLogger(_ROOT_NAME).getChild(name)
