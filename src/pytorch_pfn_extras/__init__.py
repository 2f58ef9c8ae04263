"""pytorch-pfn-extras: supplementary components for PyTorch.

This meta-package owns only this file, ``__main__.py`` and ``_version.py``;
every subpackage is shipped by one of the ``ppe-*`` distributions and found
through the namespace path below.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

import pytorch_pfn_extras.config
import pytorch_pfn_extras.config_types
import pytorch_pfn_extras.cuda
import pytorch_pfn_extras.dataloaders
import pytorch_pfn_extras.dataset
import pytorch_pfn_extras.distributed
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.interop
import pytorch_pfn_extras.logging
import pytorch_pfn_extras.nn
import pytorch_pfn_extras.onnx
import pytorch_pfn_extras.profiler
import pytorch_pfn_extras.reporting
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
import pytorch_pfn_extras.utils
import pytorch_pfn_extras.writing
from pytorch_pfn_extras._version import __version__
from pytorch_pfn_extras.interop import (
    as_ndarray,
    as_numpy_dtype,
    from_ndarray,
    from_numpy_dtype,
    get_xp,
)
from pytorch_pfn_extras.runtime import map, to


def requires(version: str, package: str = "torch") -> None:
    """Raise RuntimeError unless ``package`` is installed at ``version`` or newer.

    Args:
        version: The minimum version, a PEP 440 string such as ``"2.1.0"``.
        package: The distribution to check (``torch`` by default).

    Example:
        >>> ppe.requires("2.1.0")
    """
    import importlib.metadata

    from packaging.version import InvalidVersion, Version

    try:
        wanted = Version(version)
    except InvalidVersion:
        message = f"requires() needs a PEP 440 version string, got {version!r}"
        raise ValueError(message) from None
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        message = f"{package} {version} or newer is required, but {package} is not installed"
        raise RuntimeError(message) from None
    if Version(installed) < wanted:
        message = f"{package} {version} or newer is required, but {installed} is installed"
        raise RuntimeError(message)


__all__ = [
    "__version__",
    "as_ndarray",
    "as_numpy_dtype",
    "config",
    "config_types",
    "cuda",
    "dataloaders",
    "dataset",
    "distributed",
    "engine",
    "from_ndarray",
    "from_numpy_dtype",
    "get_xp",
    "handler",
    "interop",
    "logging",
    "map",
    "nn",
    "onnx",
    "profiler",
    "reporting",
    "requires",
    "runtime",
    "to",
    "training",
    "utils",
    "writing",
]
