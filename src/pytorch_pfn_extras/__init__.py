"""pytorch-pfn-extras: supplementary components for PyTorch.

This meta-package owns only this file, ``__main__.py`` and ``_version.py``;
every subpackage is shipped by one of the ``ppe-*`` distributions and found
through the namespace path below.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from typing import TYPE_CHECKING, Any

# Imported now: what the top-level names need, and the CUDA runtime (it registers itself).
import pytorch_pfn_extras.cuda
import pytorch_pfn_extras.interop
import pytorch_pfn_extras.logging
import pytorch_pfn_extras.runtime

# Imported when first used (``ppe.training``...): ``import pytorch_pfn_extras`` stays light.
_LAZY_SUBPACKAGES = frozenset(
    {
        "config",
        "config_types",
        "dataloaders",
        "dataset",
        "distributed",
        "engine",
        "handler",
        "nn",
        "onnx",
        "ops",
        "profiler",
        "reporting",
        "testing",
        "torchscript",
        "training",
        "utils",
        "writing",
    }
)

if TYPE_CHECKING:
    import pytorch_pfn_extras.config
    import pytorch_pfn_extras.config_types
    import pytorch_pfn_extras.dataloaders
    import pytorch_pfn_extras.dataset
    import pytorch_pfn_extras.distributed
    import pytorch_pfn_extras.engine
    import pytorch_pfn_extras.handler
    import pytorch_pfn_extras.nn
    import pytorch_pfn_extras.onnx
    import pytorch_pfn_extras.ops
    import pytorch_pfn_extras.profiler
    import pytorch_pfn_extras.reporting
    import pytorch_pfn_extras.testing
    import pytorch_pfn_extras.torchscript
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
from pytorch_pfn_extras.runtime import compile, map, to


def requires(version: str, package: str = "torch") -> bool:
    """Return whether ``package`` is installed at ``version`` or newer.

    Versions compare as PEP 440 versions: a local suffix (``2.1.0+cu121``) counts as that
    release, a pre-release (``2.2.0.dev20231010``) as older than the release.

    Args:
        version: The minimum version, a PEP 440 string such as ``"2.1.0"``.
        package: The distribution to check (``torch`` by default).

    Returns:
        ``True`` when the installed version is ``version`` or newer; ``False`` when it is
        older or ``package`` is not installed.

    Raises:
        ValueError: ``version``, or the installed version, is not a PEP 440 version string.

    Example:
        >>> if ppe.requires("2.1.0"):
        ...     scaler = torch.amp.GradScaler("cuda")
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
        return False
    try:
        return Version(installed) >= wanted
    except InvalidVersion:
        message = f"the installed {package} has version {installed!r}, which PEP 440 cannot compare"
        raise ValueError(message) from None


def __getattr__(name: str) -> Any:
    """Import a subpackage at its first use as an attribute (``ppe.training``)."""
    if name in _LAZY_SUBPACKAGES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    message = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(message)


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBPACKAGES)


__all__ = [
    "__version__",
    "as_ndarray",
    "as_numpy_dtype",
    "compile",
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
    "ops",
    "profiler",
    "reporting",
    "requires",
    "runtime",
    "testing",
    "to",
    "torchscript",
    "training",
    "utils",
    "writing",
]
