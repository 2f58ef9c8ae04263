"""Annotated nodes, anchors and extra outputs: marks on the traced graph that the hooks finish.

- :func:`annotate_nodes` tags the traced ``aten::`` nodes made in an annotated scope with an
  index attribute; :func:`run_symbolic_function_with_annotations`, the hook of the exporter's
  symbolic dispatch, removes the tag before the symbolic function sees the node and puts the
  user's attributes on the ONNX node it produced.
- Anchors and extra outputs are autograd functions whose ``symbolic`` emits an ``Identity``
  node carrying a marker attribute, which the naming hook turns into a name or an output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from pytorch_pfn_extras.onnx._torch_onnx._graph import (
    CONSTANT_KINDS,
    RUNNING,
    TAG_ANNOTATION,
    TAG_KEEP_IDENTITY,
    TAG_NAME,
    TAG_OUTPUT,
    Anchor,
    AttrValue,
    all_nodes,
    current,
    set_attrs,
    traced_graph,
)


class NodeSpan:
    """The nodes the tracer adds to the traced graph between ``__init__`` and :meth:`nodes`."""

    def __init__(self) -> None:
        self._graph = traced_graph()
        # Held so that the wrappers' ids stay unique. Module calls are traced into the blocks
        # of ``prim::TracedModuleForward`` nodes, inlined later: walk the blocks too.
        self._before = list(all_nodes(self._graph))
        self._ids = {id(node) for node in self._before}

    def nodes(self) -> list[torch._C.Node]:
        return [node for node in all_nodes(self._graph) if id(node) not in self._ids]


def annotate_nodes(nodes: Sequence[torch._C.Node], attrs: dict[str, AttrValue]) -> None:
    """Give the ONNX nodes made from ``nodes`` the attributes ``attrs`` (in the running export)."""
    state = current()
    index = len(state.annotations)
    state.annotations.append(attrs)
    for node in nodes:
        if node.kind().startswith("aten::") and not node.hasAttribute(TAG_ANNOTATION):
            node.i_(TAG_ANNOTATION, index)


def _is_constant(value: torch._C.Value, params: set[str], constants: set[int]) -> bool:
    node = value.node()
    if node.kind() in CONSTANT_KINDS or id(node) in constants:
        return True
    return node.kind() == "prim::Param" and value.debugName() in params


def _first_computing_node(nodes: Sequence[torch._C.Node]) -> torch._C.Node:
    """The first node that reads a value computed from the inputs (not folded into a constant).

    ``nn.Linear`` exports ``Transpose(weight) -> MatMul -> Add``; the transpose of a parameter
    becomes an initializer, so the annotation belongs to the ``MatMul``.
    """
    params = RUNNING.param_names
    constants: set[int] = set()
    for node in nodes:
        if all(_is_constant(v, params, constants) for v in node.inputs()):
            constants.add(id(node))
        else:
            return node
    return nodes[0]


def run_symbolic_function_with_annotations(
    original: Callable[..., Any],
    graph: torch._C.Graph,
    block: torch._C.Block,
    node: torch._C.Node,
    inputs: Any,
    env: Any,
    values_in_env: Any,
    new_nodes: list[torch._C.Node],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The hook of the exporter's ``_run_symbolic_function``: annotates what it makes."""
    state = RUNNING.state
    if state is None or not node.hasAttribute(TAG_ANNOTATION):
        return original(graph, block, node, inputs, env, values_in_env, new_nodes, *args, **kwargs)
    index = node.i(TAG_ANNOTATION)
    node.removeAttribute(TAG_ANNOTATION)
    start = len(new_nodes)
    outputs = original(graph, block, node, inputs, env, values_in_env, new_nodes, *args, **kwargs)
    made = [n for n in new_nodes[start:] if n.kind() not in CONSTANT_KINDS]
    if made and index < len(state.annotations):
        set_attrs(_first_computing_node(made), state.annotations[index])
    return outputs


class _AnchorFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: int) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None

    @staticmethod
    def symbolic(g: Any, x: torch._C.Value, index: int) -> torch._C.Value:
        state = RUNNING.state
        anchor = state.anchors[index] if state is not None else None
        if anchor is None or not anchor.emit:
            return x
        y = g.op("Identity", x)
        set_attrs(y.node(), anchor.attrs)
        y.node().s_(TAG_NAME, anchor.name)
        return cast(torch._C.Value, y)


def new_anchor_pair() -> int:
    """The index N of the next ``Anchor_N_start`` / ``Anchor_N_end`` pair of the export."""
    state = current()
    state.n_anchor_pairs += 1
    return state.n_anchor_pairs - 1


def anchor(x: torch.Tensor, name: str, attrs: dict[str, AttrValue]) -> tuple[torch.Tensor, int]:
    """Pass ``x`` through an ``Identity`` node named ``name``; returns the anchor's handle."""
    state = current()
    state.anchors.append(Anchor(name, attrs))
    index = len(state.anchors) - 1
    y = _AnchorFunction.apply(x, index)  # type: ignore[no-untyped-call]
    return cast(torch.Tensor, y), index


def drop_anchor(handle: int) -> None:
    """Export the anchor ``handle`` as nothing: its ``Identity`` node is not made."""
    state = RUNNING.state
    if state is not None and handle < len(state.anchors):
        state.anchors[handle].emit = False


class _OutputFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, name: str, add_identity: bool) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None

    @staticmethod
    def symbolic(g: Any, x: torch._C.Value, name: str, add_identity: bool) -> torch._C.Value:
        y = g.op("Identity", x)
        y.node().s_(TAG_OUTPUT, name)
        y.node().i_(TAG_KEEP_IDENTITY, int(add_identity))
        g.graph.registerOutput(y)  # an output from now on, so that no pass removes it
        return x


def mark_output(x: torch.Tensor, name: str, add_identity: bool) -> torch.Tensor:
    """Export ``x`` as an extra graph output named ``name`` (see ``as_output``)."""
    current()
    y = _OutputFunction.apply(x, name, add_identity)  # type: ignore[no-untyped-call]
    return cast(torch.Tensor, y)
