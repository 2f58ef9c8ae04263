"""pytorch-pfn-extras: supplementary components for PyTorch.

This meta-package owns only this file, ``__main__.py`` and ``_version.py``;
every subpackage is shipped by one of the ``ppe-*`` distributions and found
through the namespace path below.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

import os as _os
from typing import TYPE_CHECKING, Any


def _lost_subpackages() -> list[str]:
    """Return the subpackage folders that hold ``py.typed`` but no ``__init__.py``.

    Every subpackage a component owns ships both. Upgrading pytorch-pfn-extras 0.x in place
    leaves the first without the second: pip installs the new components, then removes the
    files of 0.x, which include the components' ``__init__.py`` (and modules) at the paths
    0.x used too. One scan per namespace folder keeps this check at tens of microseconds.
    """
    lost = []
    for folder in __path__:
        try:
            entries = list(_os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if (
                entry.is_dir()
                and not _os.path.exists(_os.path.join(entry.path, "__init__.py"))
                and _os.path.exists(_os.path.join(entry.path, "py.typed"))
            ):
                lost.append(entry.path)
    return sorted(lost)


def _incomplete_install_error(lost: list[str]) -> ImportError:
    """Build the error that names the damaged components and the command repairing them."""
    import importlib.metadata

    site = _os.path.dirname(_os.path.dirname(lost[0]))
    wanted = {
        _os.path.relpath(_os.path.join(folder, "py.typed"), site).replace(_os.sep, "/")
        for folder in lost
    }
    owners = {
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if wanted.intersection(str(file) for file in dist.files or [])
    }
    repair = " ".join(sorted(owners)) or (
        "ppe-core ppe-training ppe-runtime-cuda ppe-onnx ppe-config ppe-dataset"
    )
    folders = "".join(f"\n    {folder}" for folder in lost)
    message = (
        "pytorch_pfn_extras is installed incompletely: these subpackages lost their"
        f" __init__.py (and possibly other modules):{folders}\n"
        "Upgrading pytorch-pfn-extras 0.x in place does this: pip installs the new components,"
        " then removes the old version's files, some of which are now the components' own.\n"
        f"Repair this environment with:\n    pip install --force-reinstall --no-deps {repair}\n"
        "To upgrade from 0.x, remove it first:\n"
        "    pip uninstall -y pytorch-pfn-extras && pip install pytorch-pfn-extras"
    )
    return ImportError(message)


_lost = _lost_subpackages()
if _lost:
    raise _incomplete_install_error(_lost)
del _lost

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
