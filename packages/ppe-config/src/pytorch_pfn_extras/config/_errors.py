"""Exceptions raised by ``Config``."""

from __future__ import annotations


class ConfigError(Exception):
    """An error while reading or evaluating a config.

    Every message names the config path where the problem happened and, when the value was
    reached through references or nested callables, the evaluation chain that led there
    (``/trainer -> /optimizer -> /optimizer/model``).

    Attributes:
        path: The config path where the error happened (``"/optimizer/lr"``).
        trace: The evaluation chain, outermost first, as config paths.
    """

    __module__ = "pytorch_pfn_extras.config"

    def __init__(self, message: str, *, path: str = "/", trace: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.trace = trace

    def __str__(self) -> str:
        return self.message


class ConfigKeyError(ConfigError, KeyError):
    """A path, key, index or type name that does not exist in the config."""

    __module__ = "pytorch_pfn_extras.config"


class CircularReferenceError(ConfigError, RuntimeError):
    """References (or imports) that form a cycle; the message shows the cycle."""

    __module__ = "pytorch_pfn_extras.config"
