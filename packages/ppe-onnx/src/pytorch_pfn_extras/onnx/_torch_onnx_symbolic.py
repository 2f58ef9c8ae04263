"""Every use of torch.onnx internals by the annotation, output and registry helpers.

Tested with torch 2.13's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``);
when torch moves these internals, this module is the one to change.

How the helpers reach into an export, all of it inert outside one:

- While the model is traced, :func:`annotations` tags the traced ``aten::`` nodes made in an
  annotated scope with an index attribute; a wrapper of the exporter's
  ``_run_symbolic_function`` removes the tag before the symbolic function sees the node and
  puts the user's attributes on the ONNX node it produced.
- Anchors and extra outputs are autograd functions whose ``symbolic`` emits an ``Identity``
  node carrying a marker attribute.
- A wrapper of ``_get_named_param_dict`` records which graph inputs are parameters.
- A wrapper of ``_jit_pass_onnx_assign_output_shape`` hides the extra outputs from it.
- A wrapper of the exporter's naming pass runs last: it gives marked nodes their names, moves
  the extra outputs behind the model's own outputs, and removes the markers.

The wrappers are installed on first use (:func:`install`) and pass everything through when no
helper was used in the running export.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.onnx._internal.torchscript_exporter import registration
from torch.onnx._internal.torchscript_exporter import utils as _ts_utils

TAG_ANNOTATION = "ppe_annotation"
TAG_NAME = "ppe_node_name"
TAG_OUTPUT = "ppe_output_name"
TAG_KEEP_IDENTITY = "ppe_output_identity"
_ONNX_NAME = "onnx_name"  # the attribute the exporter reads a node's ONNX name from
_CONSTANT_KINDS = ("onnx::Constant", "prim::Constant")

AttrValue = bool | int | float | str | Sequence[int] | Sequence[float] | Sequence[str]


@dataclass
class _Anchor:
    name: str
    attrs: dict[str, AttrValue]
    emit: bool = True


@dataclass
class _ExportState:
    """What the helpers recorded while one model was traced."""

    tracing_state: Any
    annotations: list[dict[str, AttrValue]] = field(default_factory=list)
    anchors: list[_Anchor] = field(default_factory=list)
    n_anchor_pairs: int = 0


_state: _ExportState | None = None
_installed = False
_param_names: set[str] = set()  # the graph inputs of the running export that are parameters


def in_export() -> bool:
    """Whether a TorchScript-based ONNX export is tracing the model now."""
    return bool(torch.onnx.is_in_onnx_export()) and torch._C._get_tracing_state() is not None


def _current() -> _ExportState:
    global _state
    tracing_state = torch._C._get_tracing_state()
    if _state is None or _state.tracing_state is not tracing_state:
        _state = _ExportState(tracing_state)
    return _state


# ---------------------------------------------------------------------------------------------
# Attributes


def check_attrs(attrs: dict[str, Any]) -> dict[str, AttrValue]:
    """Raise ``TypeError`` for a value that cannot be an ONNX attribute."""
    for key, value in attrs.items():
        if _attr_setter(value) is None:
            message = (
                f"ONNX attribute {key!r} must be a bool, int, float, str or a list of one of "
                f"them, got {type(value).__name__}: {value!r}"
            )
            raise TypeError(message)
    return dict(attrs)


def _attr_setter(value: Any) -> str | None:
    if isinstance(value, bool | int):
        return "i_"
    if isinstance(value, float):
        return "f_"
    if isinstance(value, str):
        return "s_"
    if isinstance(value, list | tuple) and value:
        kinds = {_attr_setter(v) for v in value}
        if kinds == {"i_"}:
            return "is_"
        if kinds <= {"i_", "f_"}:
            return "fs_"
        if kinds == {"s_"}:
            return "ss_"
    return None


def _set_attrs(node: torch._C.Node, attrs: dict[str, AttrValue]) -> None:
    for key, value in attrs.items():
        setter = _attr_setter(value)
        if setter == "is_":
            getattr(node, setter)(key, [int(v) for v in cast(Sequence[int], value)])
        elif setter == "fs_":
            getattr(node, setter)(key, [float(v) for v in cast(Sequence[float], value)])
        elif setter == "i_":
            node.i_(key, int(cast(int, value)))
        else:
            getattr(node, cast(str, setter))(key, value)


# ---------------------------------------------------------------------------------------------
# Annotations of traced nodes


class NodeSpan:
    """The nodes the tracer adds to the traced graph between ``__init__`` and :meth:`nodes`."""

    def __init__(self) -> None:
        self._graph = torch._C._get_tracing_state().graph()
        # Held so that the wrappers' ids stay unique. Module calls are traced into the blocks
        # of ``prim::TracedModuleForward`` nodes, inlined later: walk the blocks too.
        self._before = list(_all_nodes(self._graph))
        self._ids = {id(node) for node in self._before}

    def nodes(self) -> list[torch._C.Node]:
        return [node for node in _all_nodes(self._graph) if id(node) not in self._ids]


def annotate_nodes(nodes: Sequence[torch._C.Node], attrs: dict[str, AttrValue]) -> None:
    """Give the ONNX nodes made from ``nodes`` the attributes ``attrs`` (in the running export)."""
    state = _current()
    index = len(state.annotations)
    state.annotations.append(attrs)
    for node in nodes:
        if node.kind().startswith("aten::") and not node.hasAttribute(TAG_ANNOTATION):
            node.i_(TAG_ANNOTATION, index)


def _is_constant(value: torch._C.Value, params: set[str], constants: set[int]) -> bool:
    node = value.node()
    if node.kind() in _CONSTANT_KINDS or id(node) in constants:
        return True
    return node.kind() == "prim::Param" and value.debugName() in params


def _first_computing_node(nodes: Sequence[torch._C.Node]) -> torch._C.Node:
    """The first node that reads a value computed from the inputs (not folded into a constant).

    ``nn.Linear`` exports ``Transpose(weight) -> MatMul -> Add``; the transpose of a parameter
    becomes an initializer, so the annotation belongs to the ``MatMul``.
    """
    params = _param_names
    constants: set[int] = set()
    for node in nodes:
        if all(_is_constant(v, params, constants) for v in node.inputs()):
            constants.add(id(node))
        else:
            return node
    return nodes[0]


def _run_symbolic_function_with_annotations(
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
    if _state is None or not node.hasAttribute(TAG_ANNOTATION):
        return original(graph, block, node, inputs, env, values_in_env, new_nodes, *args, **kwargs)
    index = node.i(TAG_ANNOTATION)
    node.removeAttribute(TAG_ANNOTATION)
    start = len(new_nodes)
    outputs = original(graph, block, node, inputs, env, values_in_env, new_nodes, *args, **kwargs)
    made = [n for n in new_nodes[start:] if n.kind() not in _CONSTANT_KINDS]
    if made and index < len(_state.annotations):
        _set_attrs(_first_computing_node(made), _state.annotations[index])
    return outputs


# ---------------------------------------------------------------------------------------------
# Anchors and extra outputs


class _AnchorFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: int) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None

    @staticmethod
    def symbolic(g: Any, x: torch._C.Value, index: int) -> torch._C.Value:
        anchor = _state.anchors[index] if _state is not None else None
        if anchor is None or not anchor.emit:
            return x
        y = g.op("Identity", x)
        _set_attrs(y.node(), anchor.attrs)
        y.node().s_(TAG_NAME, anchor.name)
        return cast(torch._C.Value, y)


def new_anchor_pair() -> int:
    """The index N of the next ``Anchor_N_start`` / ``Anchor_N_end`` pair of the export."""
    state = _current()
    state.n_anchor_pairs += 1
    return state.n_anchor_pairs - 1


def anchor(x: torch.Tensor, name: str, attrs: dict[str, AttrValue]) -> tuple[torch.Tensor, int]:
    """Pass ``x`` through an ``Identity`` node named ``name``; returns the anchor's handle."""
    state = _current()
    state.anchors.append(_Anchor(name, attrs))
    index = len(state.anchors) - 1
    y = _AnchorFunction.apply(x, index)  # type: ignore[no-untyped-call]
    return cast(torch.Tensor, y), index


def drop_anchor(handle: int) -> None:
    """Export the anchor ``handle`` as nothing: its ``Identity`` node is not made."""
    if _state is not None and handle < len(_state.anchors):
        _state.anchors[handle].emit = False


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
    _current()
    y = _OutputFunction.apply(x, name, add_identity)  # type: ignore[no-untyped-call]
    return cast(torch.Tensor, y)


def _all_nodes(block: Any) -> Iterator[torch._C.Node]:
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub)


def _finish_graph(graph: torch._C.Graph) -> None:
    """Name the marked nodes, move the extra outputs last, remove every marker attribute."""
    extra: list[tuple[torch._C.Value, torch._C.Node]] = []
    for node in list(_all_nodes(graph)):
        if node.hasAttribute(TAG_ANNOTATION):
            node.removeAttribute(TAG_ANNOTATION)
        if node.hasAttribute(TAG_NAME):
            node.s_(_ONNX_NAME, node.s(TAG_NAME))
            node.removeAttribute(TAG_NAME)
        if node.hasAttribute(TAG_OUTPUT):
            extra.append((node.output(), node))
    if not extra:
        return
    outputs = list(graph.outputs())
    extra_ids = {id(value) for value, _ in extra}
    for i in reversed(range(len(outputs))):
        if id(outputs[i]) in extra_ids:
            graph.eraseOutput(i)
    for value, node in extra:
        name = node.s(TAG_OUTPUT)
        keep = bool(node.i(TAG_KEEP_IDENTITY))
        node.removeAttribute(TAG_OUTPUT)
        node.removeAttribute(TAG_KEEP_IDENTITY)
        if not keep:
            source = node.input()
            value.replaceAllUsesWith(source)
            node.destroy()
            value = source
        value.setDebugName(name)
        graph.registerOutput(value)


def _extra_outputs_set_aside(original: Callable[..., None], graph: Any, *args: Any) -> None:
    """Run the pass that matches the graph outputs to PyTorch's without the extra outputs."""
    outputs = list(graph.outputs())
    extra = [i for i, v in enumerate(outputs) if v.node().hasAttribute(TAG_OUTPUT)]
    for i in reversed(extra):
        graph.eraseOutput(i)
    try:
        original(graph, *args)
    finally:
        for i in extra:
            graph.registerOutput(outputs[i])


def _named_params_recorded(original: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    global _param_names
    params = original(*args)
    _param_names = set(params)
    return params


def _assign_names_then_finish(original: Callable[[torch._C.Graph], None], graph: Any) -> None:
    global _state
    original(graph)
    if _state is not None:
        try:
            _finish_graph(graph)
        finally:
            _state = None


def install() -> None:
    """Wrap the exporter's symbolic dispatch and naming pass (once per process)."""
    global _installed
    if _installed:
        return
    _ts_utils._run_symbolic_function = functools.partial(
        _run_symbolic_function_with_annotations, _ts_utils._run_symbolic_function
    )
    _ts_utils._get_named_param_dict = functools.partial(
        _named_params_recorded, _ts_utils._get_named_param_dict
    )
    shapes = torch._C._jit_pass_onnx_assign_output_shape
    torch._C._jit_pass_onnx_assign_output_shape = functools.partial(
        _extra_outputs_set_aside, shapes
    )
    naming = torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value
    torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value = functools.partial(
        _assign_names_then_finish, naming
    )
    _installed = True


# ---------------------------------------------------------------------------------------------
# Symbolic registry


def _qualified(opname: str, domain: str) -> str:
    return f"{domain or 'aten'}::{opname}"


def is_registered_op(opname: str, domain: str, version: int) -> bool:
    return bool(registration.registry.is_registered_op(_qualified(opname, domain), version))


def get_registered_op(opname: str, domain: str, version: int) -> Callable[..., Any]:
    group = registration.registry.get_function_group(_qualified(opname, domain))
    function = group.get(version) if group is not None else None
    if function is None:
        message = (
            f"no symbolic function is registered for {_qualified(opname, domain)!r} "
            f"at opset {version}"
        )
        raise KeyError(message)
    return function


def register_op(op_type: str, f: Callable[..., Any], domain: str, opset_version: int) -> None:
    _ts_utils.register_custom_op_symbolic(_qualified(op_type, domain), f, opset_version)
