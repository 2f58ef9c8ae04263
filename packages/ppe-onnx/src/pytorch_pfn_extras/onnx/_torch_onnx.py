"""Every use of torch.onnx (and of the tracer's graph) by ppe-onnx lives here.

The torch ONNX exporter changes between releases (torch 2.9 made the torch.export-based exporter
the default and deprecated the TorchScript-based one); when it moves again, this module is the one
to change. Tested with torch 2.13 and its TorchScript-based exporter (``dynamo=False``), whose
default opset is 20, which is what PPE 0.9 used ("torch-onnx-utils").

How the helpers reach into an export, all of it inert outside one:

- While the model is traced, :func:`annotate_nodes` tags the traced ``aten::`` nodes made in an
  annotated scope with an index attribute; a wrapper of the exporter's
  ``_run_symbolic_function`` removes the tag before the symbolic function sees the node and
  puts the user's attributes on the ONNX node it produced.
- Anchors and extra outputs are autograd functions whose ``symbolic`` emits an ``Identity``
  node carrying a marker attribute.
- Loops and conditionals (:func:`trace_loop`, :func:`trace_if`) add ``prim::Loop`` /
  ``prim::If`` nodes to the traced graph and trace the body into their blocks; the exporter
  turns them into ONNX ``Loop`` / ``If``, as it does for scripted code.
- :func:`gradient` is an autograd function whose ``symbolic`` emits the ONNX ``Gradient`` node
  and keeps the differentiated value alive as a temporary graph output.
- A wrapper of ``_get_named_param_dict`` records which graph inputs are parameters.
- A wrapper of ``_jit_pass_onnx_assign_output_shape`` hides the extra outputs from it.
- A wrapper of the exporter's naming pass runs last: it gives marked nodes their names, moves
  the extra outputs behind the model's own outputs, writes the final value names into the
  ``Gradient`` nodes, and removes the markers.

The wrappers are installed on first use (:func:`install`) and pass everything through when no
helper was used in the running export. ``torch.onnx._internal`` is imported then too, so that
importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

# The tracer's functions and graph methods used below are missing from torch's type stubs.
_C: Any = torch._C

EXPORTER = "torch-onnx-utils"
"""The name meta.json gives the exporter (PPE 0.9's name for torch.onnx's TorchScript exporter)."""

# Warnings the TorchScript exporter gives on every call whatever the model: its own deprecation
# (users asked for this exporter) and the RNN batch-size notice (raised even when the initial
# states are inputs, as it advises).
_QUIET: tuple[tuple[str, type[Warning]], ...] = (
    (r"You are using the legacy TorchScript-based ONNX export", DeprecationWarning),
    (r"The feature will be removed", DeprecationWarning),
    (r"Exporting a model to ONNX with a batch_size other than 1", UserWarning),
    # training=TrainingMode.TRAINING, which ppe-onnx takes as PPE 0.9 did
    (r"Setting `training` to something other than default is deprecated", DeprecationWarning),
)


def _training_mode(training: Any) -> Any:
    """The torch.onnx.TrainingMode for PPE 0.9's ``training``: None or False is EVAL, True is
    TRAINING (torch 2.13's exporter takes the enum only)."""
    if training is None or training is False:
        return torch.onnx.TrainingMode.EVAL
    if training is True:
        return torch.onnx.TrainingMode.TRAINING
    if isinstance(training, torch.onnx.TrainingMode):
        return training
    message = (
        "training must be a bool or a torch.onnx.TrainingMode (EVAL, TRAINING, PRESERVE), "
        f"got {type(training).__name__}: {training!r}"
    )
    raise TypeError(message)


@contextlib.contextmanager
def export_mode(model: torch.nn.Module, training: Any = None) -> Iterator[None]:
    """Put ``model`` in the train/eval mode that the exporter uses for ``training``."""
    mode = _training_mode(training)
    if mode == torch.onnx.TrainingMode.PRESERVE:
        yield
        return
    was_training = model.training
    model.train(mode == torch.onnx.TrainingMode.TRAINING)
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _doc_strings(strip: bool | None) -> Iterator[None]:
    """Make the exporter strip (True) or keep (False) the nodes' doc strings, their source
    locations; torch 2.13 has no option for it and keeps them only with ``verbose=True``."""
    if strip is None:
        yield
        return
    graph_type = _C.Graph
    original = graph_type._export_onnx

    def export_onnx(graph: Any, *args: Any) -> Any:
        # (params, opset, dynamic_axes, defer_weight_export, export_type, strip_doc_string, ...)
        return original(graph, *args[:5], strip, *args[6:])

    graph_type._export_onnx = export_onnx
    try:
        yield
    finally:
        graph_type._export_onnx = original


def export_to_bytes(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    export_kwargs: Mapping[str, Any],
    *,
    exporter: Callable[..., Any] | None = None,
    strip_doc_string: bool | None = None,
) -> bytes:
    """Export with the TorchScript-based exporter and return the serialized ModelProto.

    ``export_kwargs`` are torch.onnx.export's keyword arguments (``input_names``,
    ``dynamic_axes``, ``opset_version``, ...); ``verbose`` defaults to False and ``training``
    may be a bool. ``exporter``, called with the arguments torch.onnx.export would get (a
    binary file object as ``f``), replaces it. ``strip_doc_string`` None leaves the doc
    strings to the exporter (kept only with ``verbose``).
    """
    options = dict(export_kwargs)
    options.setdefault("verbose", False)
    options.pop("dynamo", None)
    if "training" in options:
        options["training"] = _training_mode(options["training"])
    # the TorchScript exporter writes to file objects too, whatever its type hints say
    export: Callable[..., Any] = torch.onnx.export if exporter is None else exporter
    buffer = io.BytesIO()
    with warnings.catch_warnings(), _doc_strings(strip_doc_string):
        for message, category in _QUIET:
            warnings.filterwarnings("ignore", message=message, category=category)
        # torch's own modules (RNNs, attention) trip the tracer's warnings on every export;
        # the warnings that the user's code raises stay.
        tracer_warning = torch.jit.TracerWarning  # type: ignore[attr-defined]
        warnings.filterwarnings("ignore", category=tracer_warning, module=r"torch\.")
        export(
            model,
            args,
            buffer,
            kwargs=dict(kwargs) or None,
            dynamo=False,
            **options,
        )
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# The state of the running export


TAG_ANNOTATION = "ppe_annotation"
TAG_NAME = "ppe_node_name"
TAG_OUTPUT = "ppe_output_name"
TAG_KEEP_IDENTITY = "ppe_output_identity"
TAG_GRADIENT = "ppe_gradient"  # on a Gradient node: the index of its differentiated value
TAG_GRADIENT_Y = "ppe_gradient_y"  # on the Identity keeping that value alive until the end
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
    n_gradients: int = 0


_state: _ExportState | None = None
_installed = False
_param_names: set[str] = set()  # the graph inputs of the running export that are parameters


def in_export() -> bool:
    """Whether a TorchScript-based ONNX export is tracing the model now."""
    return bool(torch.onnx.is_in_onnx_export()) and torch._C._get_tracing_state() is not None


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Run the block in PyTorch without recording it into the traced graph."""
    tracing_state = torch._C._get_tracing_state()
    _C._set_tracing_state(None)
    try:
        yield
    finally:
        _C._set_tracing_state(tracing_state)


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
        self._graph = _graph()
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


# ---------------------------------------------------------------------------------------------
# Loops and conditionals
#
# The body is traced into the block of a ``prim::Loop`` / ``prim::If`` node: the graph's insertion
# point moves into the block, and placeholder tensors stand for the block's inputs. Module calls
# in the body are traced without their scope blocks (``prim::TracedModuleForward``), which the
# tracer's clean-up pass cannot lift out of a loop. The values the caller gets are computed by
# running the Python control flow untraced, and bound to the node's outputs.


def _graph() -> Any:
    return torch._C._get_tracing_state().graph()


def _trace(tensor: torch.Tensor) -> torch._C.Value:
    return cast(torch._C.Value, _C._get_value_trace(tensor))


def _placeholder(value: torch._C.Value, like: torch.Tensor) -> torch.Tensor:
    with untraced():
        tensor = like.detach().clone()
    _C._set_value_trace(tensor, value)
    return tensor


def _insert(kind: str, inputs: Sequence[torch._C.Value], type_: Any) -> torch._C.Value:
    graph = _graph()
    node = graph.create(kind, list(inputs), 1)
    graph.insertNode(node)
    node.output().setType(type_)
    return cast(torch._C.Value, node.output())


def _as_int(tensor: torch.Tensor) -> torch._C.Value:
    return _insert("aten::Int", [_trace(tensor)], torch._C.IntType.get())


def _as_bool(tensor: torch.Tensor) -> torch._C.Value:
    return _insert("aten::Bool", [_trace(tensor)], torch._C.BoolType.get())


@contextlib.contextmanager
def _tracing_into(block: Any) -> Iterator[None]:
    trace_module = torch.jit._trace
    scopes = trace_module._trace_module_map
    trace_module._trace_module_map = None
    try:
        with _graph().insert_point_guard(block):
            yield
    finally:
        trace_module._trace_module_map = scopes


def _check_tensors(what: str, values: Sequence[Any]) -> list[torch.Tensor]:
    for value in values:
        if not isinstance(value, torch.Tensor):
            message = (
                f"{what} must be tensors to be exported, got {type(value).__name__}: {value!r}"
            )
            raise TypeError(message)
    return list(values)


def _bind(results: Sequence[torch.Tensor], values: Sequence[torch._C.Value]) -> None:
    for result, value in zip(results, values, strict=True):
        value.setType(torch._C.TensorType.create_from_tensor(result))
        _C._set_value_trace(result, value)


def _register_outputs(block: Any, outputs: Sequence[Any], count: int, what: str) -> None:
    outputs = _check_tensors(f"the values {what} returns", outputs)
    if len(outputs) != count:
        message = f"{what} returned {len(outputs)} tensors where {count} are expected"
        raise ValueError(message)
    for output in outputs:
        block.registerOutput(_trace(output))


LoopBody = Callable[
    [torch.Tensor, list[torch.Tensor]], tuple[torch.Tensor | None, Sequence[torch.Tensor]]
]


def trace_loop(
    trip_count: int | torch.Tensor | None,
    condition: torch.Tensor | None,
    carried: Sequence[torch.Tensor],
    body: LoopBody,
    results: Sequence[torch.Tensor],
) -> None:
    """Record ``prim::Loop`` (exported as ONNX ``Loop``) whose outputs are ``results``.

    ``trip_count``: an int, a 0-d integer tensor traced in the graph, or None (no limit).
    ``condition``: a tensor, None for true. ``body(i, carried)`` is traced once into the loop
    body with ``i`` a 0-d int64 tensor (the iteration number, from 0) and returns the next
    condition (None: true) and the next carried values. ``results`` are the tensors PyTorch
    computed for the loop, bound to its outputs.
    """
    graph = _graph()
    carried = _check_tensors("the values a loop carries", carried)
    if isinstance(trip_count, torch.Tensor):
        trip = _as_int(trip_count)
    else:
        trip = graph.insertConstant(
            torch.iinfo(torch.int64).max if trip_count is None else trip_count
        )
    cond = graph.insertConstant(True) if condition is None else _as_bool(condition)
    initial = [_trace(t) for t in carried]
    node = graph.create("prim::Loop", [trip, cond, *initial], len(carried))
    graph.insertNode(node)
    block = node.addBlock()
    iteration = block.addInputToBlock()
    iteration.setType(torch._C.IntType.get())
    inputs = []
    for value, tensor in zip(initial, carried, strict=True):
        block_input = block.addInputToBlock()
        block_input.setType(value.type())
        inputs.append(_placeholder(block_input, tensor))
    with untraced():  # the example of the iteration number, not an operation of the model
        zero = torch.zeros((), dtype=torch.int64)
    index_type = torch._C.TensorType.create_from_tensor(zero)
    with _tracing_into(block):
        index = _placeholder(_insert("prim::NumToTensor", [iteration], index_type), zero)
        next_condition, outputs = body(index, inputs)
        if next_condition is None:
            block.registerOutput(graph.insertConstant(True))
        else:
            block.registerOutput(_as_bool(next_condition))
        _register_outputs(block, outputs, len(carried), "the loop body")
    _bind(results, list(node.outputs()))


def trace_if(
    condition: torch.Tensor,
    branches: Sequence[Callable[[], Sequence[torch.Tensor]]],
    results: Sequence[torch.Tensor],
) -> None:
    """Record ``prim::If`` (exported as ONNX ``If``) choosing between two traced branches.

    Each branch is traced into its block and must return as many tensors as ``results``, the
    tensors PyTorch computed, bound to the node's outputs.
    """
    graph = _graph()
    node = graph.create("prim::If", [_as_bool(condition)], len(results))
    graph.insertNode(node)
    for name, branch in zip(("true", "false"), branches, strict=True):
        block = node.addBlock()
        with _tracing_into(block):
            _register_outputs(block, branch(), len(results), f"the {name} branch")
    _bind(results, list(node.outputs()))


# ---------------------------------------------------------------------------------------------
# The ONNX Gradient operator

GRADIENT_DOMAIN = "ai.onnx.preview.training"


class _GradientFunction(torch.autograd.Function):
    """``forward`` returns the gradients computed beforehand; ``symbolic`` emits ``Gradient``."""

    @staticmethod
    def forward(ctx: Any, n: int, index: int, y: torch.Tensor, *rest: torch.Tensor) -> Any:
        return tuple(g.clone() for g in rest[n:])

    @staticmethod
    def symbolic(g: Any, n: int, index: int, y: torch._C.Value, *rest: torch._C.Value) -> Any:
        xs = rest[:n]
        # Gradient names y instead of reading it: an Identity registered as an output keeps it
        # from being removed as unused, and is removed once the names are final.
        keep = g.op("Identity", y)
        keep.node().i_(TAG_GRADIENT_Y, index)
        g.graph.registerOutput(keep)
        outputs = g.op(
            f"{GRADIENT_DOMAIN}::Gradient", *xs, xs_s=["" for _ in xs], y_s="", outputs=n
        )
        outputs = list(outputs) if n > 1 else [outputs]
        outputs[0].node().i_(TAG_GRADIENT, index)
        for output, x in zip(outputs, xs, strict=True):
            output.setType(x.type())
        return tuple(outputs) if n > 1 else outputs[0]


def gradient(
    y: torch.Tensor, xs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """Record an ONNX ``Gradient`` node of ``y`` with respect to ``xs``; returns ``grads``."""
    state = _current()
    index = state.n_gradients
    state.n_gradients += 1
    outputs = _GradientFunction.apply(len(xs), index, y, *xs, *grads)  # type: ignore[no-untyped-call]
    return tuple(outputs) if isinstance(outputs, tuple) else (outputs,)


def _all_nodes(block: Any) -> Iterator[torch._C.Node]:
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub)


def _finish_gradients(graph: torch._C.Graph) -> None:
    """Write the final names of their values into the Gradient nodes; drop the keep-alives."""
    nodes = list(_all_nodes(graph))
    kept = {node.i(TAG_GRADIENT_Y): node for node in nodes if node.hasAttribute(TAG_GRADIENT_Y)}
    if not kept:
        return
    outputs = list(graph.outputs())
    for i in reversed(range(len(outputs))):
        if outputs[i].node().hasAttribute(TAG_GRADIENT_Y):
            graph.eraseOutput(i)
    for node in nodes:
        if node.hasAttribute(TAG_GRADIENT):
            keep = kept[node.i(TAG_GRADIENT)]
            node.removeAttribute(TAG_GRADIENT)
            node.ss_("xs", [value.debugName() for value in node.inputs()])
            node.s_("y", keep.input().debugName())
    for keep in kept.values():
        keep.destroy()


def _finish_graph(graph: torch._C.Graph) -> None:
    """Name the marked nodes, move the extra outputs last, remove every marker attribute."""
    if _state is not None and _state.n_gradients:
        _finish_gradients(graph)
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


def _is_extra_output(value: torch._C.Value) -> bool:
    node = value.node()
    return bool(node.hasAttribute(TAG_OUTPUT) or node.hasAttribute(TAG_GRADIENT_Y))


def _extra_outputs_set_aside(original: Callable[..., None], graph: Any, *args: Any) -> None:
    """Run the pass that matches the graph outputs to PyTorch's without the extra outputs."""
    outputs = list(graph.outputs())
    extra = [i for i, v in enumerate(outputs) if _is_extra_output(v)]
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
    from torch.onnx._internal.torchscript_exporter import utils as _ts_utils

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
    from torch.onnx._internal.torchscript_exporter import registration

    return bool(registration.registry.is_registered_op(_qualified(opname, domain), version))


def get_registered_op(opname: str, domain: str, version: int) -> Callable[..., Any]:
    from torch.onnx._internal.torchscript_exporter import registration

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
    from torch.onnx._internal.torchscript_exporter import utils as _ts_utils

    _ts_utils.register_custom_op_symbolic(_qualified(op_type, domain), f, opset_version)
