"""Exceptions raised by ``Config``.

Each error is a `ConfigError` and also an instance of the built-in exception that PPE raises in
the same situation (``KeyError`` for a missing key, ``IndexError`` for a missing list index,
``TypeError``/``ValueError`` for values of the wrong type, ``RuntimeError`` for a cycle; an
attribute step that fails raises what its item access raised), so ``except KeyError:`` written
for PPE keeps working.
"""

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
    """A path, key or type name that does not exist in the config (a ``KeyError``)."""

    __module__ = "pytorch_pfn_extras.config"


class ConfigIndexError(ConfigKeyError, IndexError):
    """A list index out of range: an ``IndexError``, and a `ConfigKeyError` like every path
    that does not exist."""

    __module__ = "pytorch_pfn_extras.config"


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type: a path through a scalar, a list index that is not an integer,
    a ``type`` that is not a name, an ``import`` that is not a file name (a ``TypeError``)."""

    __module__ = "pytorch_pfn_extras.config"


class ConfigValueError(ConfigError, ValueError):
    """A value that does not fit: a command-line override that cannot be cast to the type it
    replaces, a file that is not valid JSON (a ``ValueError``)."""

    __module__ = "pytorch_pfn_extras.config"


class ConfigAttributeError(ConfigError, AttributeError):
    """An ``AttributeError`` raised by a type's callable.

    An attribute step (``'@/path.attr'``) that names neither an attribute nor an item raises,
    as in PPE, the error of its item access: `ConfigKeyError`, `ConfigIndexError` or
    `ConfigTypeError`.
    """

    __module__ = "pytorch_pfn_extras.config"


class CircularReferenceError(ConfigError, RuntimeError):
    """References (or imports) that form a cycle; the message shows the cycle (a
    ``RuntimeError``)."""

    __module__ = "pytorch_pfn_extras.config"


_LIKE: dict[type[BaseException], type[ConfigError]] = {
    KeyError: ConfigKeyError,
    IndexError: ConfigIndexError,
    TypeError: ConfigTypeError,
    ValueError: ConfigValueError,
    AttributeError: ConfigAttributeError,
}


def error_like(
    cause: Exception, message: str, *, path: str, trace: tuple[str, ...] = ()
) -> ConfigError:
    """A `ConfigError` carrying ``message`` that is also an instance of ``type(cause)``.

    An exception raised by a user's callable thus stays catchable by its own class (``except
    ZeroDivisionError:`` around ``config["/model"]``), as in PPE, where it propagates as it is.
    A class whose constructor does not take a single message is replaced by the nearest base
    class that does (a ``json.JSONDecodeError`` gives a `ConfigValueError`). The caller chains
    ``cause`` (``raise error_like(exc, ...) from exc``).
    """
    for base in type(cause).__mro__:
        if base is Exception or not issubclass(base, Exception):
            break
        cls = _config_class(base)
        if cls is None:
            continue
        try:
            return cls(message, path=path, trace=trace)
        except Exception:  # its constructor wants other arguments: try the next base
            continue
    return ConfigError(message, path=path, trace=trace)


_DERIVED: dict[type[Exception], type[ConfigError] | None] = {}


def _config_class(base: type[Exception]) -> type[ConfigError] | None:
    """The `ConfigError` subclass that also derives from ``base`` (made once, then reused)."""
    if issubclass(base, ConfigError):
        return base
    known = _LIKE.get(base)
    if known is not None:
        return known
    if base not in _DERIVED:
        name = f"Config{base.__name__}"
        try:
            _DERIVED[base] = type(name, (ConfigError, base), {"__module__": ConfigError.__module__})
        except TypeError:  # a class that cannot be subclassed (or with a clashing layout)
            _DERIVED[base] = None
    return _DERIVED[base]
