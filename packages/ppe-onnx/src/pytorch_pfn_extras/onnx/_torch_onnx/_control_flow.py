"""Loops and conditionals traced into ``prim::Loop`` / ``prim::If`` nodes.

The body is traced into the block of a ``prim::Loop`` / ``prim::If`` node: the graph's insertion
point moves into the block, and placeholder tensors stand for the block's inputs. Module calls
in the body are traced without their scope blocks (``prim::TracedModuleForward``), which the
tracer's clean-up pass cannot lift out of a loop. The values the caller gets are computed by
running the Python control flow untraced, and bound to the node's outputs. The exporter turns
the nodes into ONNX ``Loop`` / ``If``, as it does for scripted code; no hook is needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch

from pytorch_pfn_extras.onnx._torch_onnx._graph import traced_graph, untraced

# The tracer's functions missing from torch's type stubs.
_C: Any = torch._C


def _trace(tensor: torch.Tensor) -> torch._C.Value:
    return cast(torch._C.Value, _C._get_value_trace(tensor))


def _placeholder(value: torch._C.Value, like: torch.Tensor) -> torch.Tensor:
    with untraced():
        tensor = like.detach().clone()
    _C._set_value_trace(tensor, value)
    return tensor


def _insert(kind: str, inputs: Sequence[torch._C.Value], type_: Any) -> torch._C.Value:
    graph = traced_graph()
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
    """Trace into ``block``, without module scopes (the tracer's own state, put back after)."""
    trace_module = torch.jit._trace
    scopes = trace_module._trace_module_map
    trace_module._trace_module_map = None
    try:
        with traced_graph().insert_point_guard(block):
            yield
    finally:
        trace_module._trace_module_map = scopes


def check_tensors(what: str, values: Sequence[Any]) -> list[torch.Tensor]:
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
    outputs = check_tensors(f"the values {what} returns", outputs)
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
    graph = traced_graph()
    carried = check_tensors("the values a loop carries", carried)
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
    graph = traced_graph()
    node = graph.create("prim::If", [_as_bool(condition)], len(results))
    graph.insertNode(node)
    for name, branch in zip(("true", "false"), branches, strict=True):
        block = node.addBlock()
        with _tracing_into(block):
            _register_outputs(block, branch(), len(results), f"the {name} branch")
    _bind(results, list(node.outputs()))
