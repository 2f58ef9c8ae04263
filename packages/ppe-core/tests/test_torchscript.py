"""ppe.torchscript: JIT passes with a lint check, and finding in-place operations."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytorch_pfn_extras.torchscript import find_inplace, run_jit_pass

# TorchScript itself is deprecated in this PyTorch; scripting warns, the helpers must not.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")


def helper(y: torch.Tensor) -> torch.Tensor:
    return y.relu_()


def scripted_source(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.add_(1)
    if bool(x.sum() > 0):
        y.mul_(2)
    for _ in range(2):
        y = y.sub(1)
    return helper(y)


def script(fn: Any) -> Any:
    return torch.jit.script(fn)


def test_find_inplace_sees_branches_and_called_functions() -> None:
    scripted = script(scripted_source)
    graph, nodes = find_inplace(scripted.graph)
    assert [node.kind() for node in nodes] == ["aten::add_", "aten::mul_", "aten::relu_"]
    assert "prim::CallFunction" not in str(graph)  # the copy is inlined


def test_find_inplace_leaves_the_given_graph_untouched() -> None:
    scripted = script(scripted_source)
    before = str(scripted.graph)
    find_inplace(scripted.graph)
    assert str(scripted.graph) == before
    assert "prim::CallFunction" in before


def test_a_functional_graph_has_no_inplace_nodes() -> None:
    def functional(x: torch.Tensor) -> torch.Tensor:
        return (x + 1).relu() * 2

    _, nodes = find_inplace(script(functional).graph)
    assert nodes == []


def test_run_jit_pass_runs_the_pass_with_its_arguments_and_lints() -> None:
    scripted = script(scripted_source)
    graph = scripted.graph.copy()
    run_jit_pass(torch._C._jit_pass_inline, graph)
    assert "prim::CallFunction" not in str(graph)

    seen: list[Any] = []

    def recording_pass(g: torch._C.Graph, *args: Any, **kwargs: Any) -> None:
        seen.append((g, args, kwargs))

    run_jit_pass(recording_pass, graph, 1, flag=True)
    assert seen == [(graph, (1,), {"flag": True})]


def test_run_jit_pass_reports_a_pass_that_breaks_the_graph() -> None:
    graph = script(scripted_source).graph.copy()

    def breaking_pass(g: torch._C.Graph) -> None:
        node = next(n for n in g.nodes() if n.kind() == "aten::clone")
        node.output().replaceAllUsesWith(g.param_node().output())  # clone() now dead...
        g.param_node().output().replaceAllUsesWith(node.output())  # ...and used before defined

    with pytest.raises(RuntimeError, match="not in scope"):
        run_jit_pass(breaking_pass, graph)
