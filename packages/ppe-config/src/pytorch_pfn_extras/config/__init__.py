"""Lazily evaluated configuration with substitution and references.

Pure Python: importing it needs neither torch nor NumPy (PyYAML only to read YAML files).
"""

from __future__ import annotations

from pytorch_pfn_extras.config._config import Config
from pytorch_pfn_extras.config._customize import customize_type
from pytorch_pfn_extras.config._errors import (
    CircularReferenceError,
    ConfigAttributeError,
    ConfigError,
    ConfigIndexError,
    ConfigKeyError,
    ConfigTypeError,
    ConfigValueError,
)
from pytorch_pfn_extras.config._version import __version__

__all__ = [
    "CircularReferenceError",
    "Config",
    "ConfigAttributeError",
    "ConfigError",
    "ConfigIndexError",
    "ConfigKeyError",
    "ConfigTypeError",
    "ConfigValueError",
    "__version__",
    "customize_type",
]
