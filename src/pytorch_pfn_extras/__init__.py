"""pytorch-pfn-extras (TEMPORARY during parallel development; full re-exports restored at integration)."""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from pytorch_pfn_extras._version import __version__

__all__ = ["__version__"]
