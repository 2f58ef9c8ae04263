"""No import cycle among the modules of pytorch_pfn_extras, in any distribution.

Every ``import`` and ``from ... import`` of the source files counts, function-local ones
included (they hide a cycle rather than remove it); imports under ``if TYPE_CHECKING:`` do not
run and do not count. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so
those packages count as imported too, except the packages the importing module is inside
(they are being initialized already).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

# registered by conftest.py, which loads source_imports.py (this directory is not on sys.path)
from ppe_tests_source_imports import from_base  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]

SOURCES = [ROOT / "src", *sorted((ROOT / "packages").glob("*/src"))]
NAMESPACE = "pytorch_pfn_extras"


def _modules() -> dict[str, Path]:
    modules = {}
    for src in SOURCES:
        for path in sorted((src / NAMESPACE).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """(module or ``module.name``, line) of every import that runs, TYPE_CHECKING aside."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module, is_package)
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
            yield base, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module: line}, within the namespace."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        is_package = path.name == "__init__.py"
        own_packages = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}
        if not is_package:
            own_packages.discard(module)
        tree = ast.parse(path.read_text(), str(path))
        for name, line in _imported_names(tree, module, is_package):
            if name not in modules:
                continue
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in modules and target not in own_packages and target != module:
                    edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_the_walker_sees_function_local_imports_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pytorch_pfn_extras.a import hidden\n"
        "def f():\n"
        "    from pytorch_pfn_extras.b import c\n"
    )
    names = {name for name, _ in _imported_names(ast.parse(source), "pytorch_pfn_extras.x", False)}
    assert "pytorch_pfn_extras.b.c" in names
    assert not any(name.startswith("pytorch_pfn_extras.a") for name in names)
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others() -> None:
    graph = _graph()
    assert len(graph) > 100  # every distribution's modules were found
    cycles = _cycles(graph)
    if cycles:
        lines = []
        for component in cycles:
            members = set(component)
            lines.append(" <-> ".join(component))
            for module in component:
                for target, line in graph[module].items():
                    if target in members:
                        lines.append(f"    {module}:{line} imports {target}")
        pytest.fail("import cycles:\n" + "\n".join(lines))
