"""What the import statements of a source file name, for the tests that check imports
(test_import_cycles.py, test_distribution_seams.py import it as ``ppe_tests_source_imports``,
which conftest.py registers)."""

from __future__ import annotations

import ast


def from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of ``from <base> import ...`` in ``module`` (relative imports
    resolved against its package; ``is_package``: ``module`` is a package's ``__init__``)."""
    base = node.module or ""
    if not node.level:
        return base
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{base}" if base else package
