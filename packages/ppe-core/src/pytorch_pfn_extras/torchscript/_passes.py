"""``run_jit_pass`` and ``find_inplace``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch


def run_jit_pass(p: Callable[..., Any], g: torch._C.Graph, *args: Any, **kwargs: Any) -> None:
    """Run the JIT pass ``p`` on ``g`` in place, then check that the graph is still well formed.

    Args:
        p: A pass, such as ``torch._C._jit_pass_inline`` or ``torch._C._jit_pass_dce``: called
            as ``p(g, *args, **kwargs)``; its return value is ignored.
        g: The graph to transform.
        *args: More positional arguments for the pass.
        **kwargs: Keyword arguments for the pass.

    Raises:
        RuntimeError: The pass left a malformed graph (``torch._C._jit_pass_lint`` failed).

    Example:
        >>> graph = torch.jit.script(fn).graph
        >>> run_jit_pass(torch._C._jit_pass_inline, graph)
    """
    p(g, *args, **kwargs)
    torch._C._jit_pass_lint(g)


def _walk(block: Any) -> Iterator[torch._C.Node]:
    for node in block.nodes():
        yield node
        for inner in node.blocks():  # the branches of prim::If, the body of prim::Loop
            yield from _walk(inner)


def _is_inplace(node: torch._C.Node) -> bool:
    namespace, _, op = node.kind().partition("::")
    return namespace == "aten" and op.endswith("_") and not op.endswith("__")


def find_inplace(g: torch._C.Graph) -> tuple[torch._C.Graph, list[torch._C.Node]]:
    """Find the in-place operations of a TorchScript graph, called functions included.

    ``g`` is left untouched: it is copied, and the copy inlined (calls to other scripted
    functions and methods replaced by their bodies), so in-place operations hidden in callees
    are found too, as are those inside ``if`` branches and loop bodies.

    Args:
        g: The graph, such as ``torch.jit.script(fn).graph``.

    Returns:
        ``(graph, nodes)``: the inlined copy, and its in-place ``aten`` nodes (kinds such as
        ``aten::add_``, ``aten::relu_``) in program order.

    Example:
        >>> graph, nodes = find_inplace(torch.jit.script(fn).graph)
        >>> nodes[0].kind()
        'aten::add_'
    """
    graph = g.copy()
    run_jit_pass(torch._C._jit_pass_inline, graph)
    return graph, [node for node in _walk(graph) if _is_inplace(node)]
