"""from_data, at PPE's public module path.

``tabular/__init__.py`` imports this module before binding ``tabular.from_data`` to the
function, so that importing the module later does not replace the function with the module.

Example:
    >>> from pytorch_pfn_extras.dataset.tabular.from_data import from_data
    >>> table = from_data({"x": np.arange(10), "y": np.arange(10) ** 2})
"""

from __future__ import annotations

from pytorch_pfn_extras.dataset.tabular._from_data import from_data

__all__ = [
    "from_data",
]
