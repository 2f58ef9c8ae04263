"""The traced graph, the ONNX attributes of its nodes, and what the running export recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

# The tracer's functions and graph methods used below are missing from torch's type stubs.
_C: Any = torch._C

TAG_ANNOTATION = "ppe_annotation"
TAG_NAME = "ppe_node_name"
TAG_OUTPUT = "ppe_output_name"
TAG_KEEP_IDENTITY = "ppe_output_identity"
TAG_GRADIENT = "ppe_gradient"  # on a Gradient node: the index of its differentiated value
TAG_GRADIENT_Y = "ppe_gradient_y"  # on the Identity keeping that value alive until the end
ONNX_NAME = "onnx_name"  # the attribute the exporter reads a node's ONNX name from
CONSTANT_KINDS = ("onnx::Constant", "prim::Constant")

AttrValue = bool | int | float | str | Sequence[int] | Sequence[float] | Sequence[str]


@dataclass
class Anchor:
    name: str
    attrs: dict[str, AttrValue]
    emit: bool = True


@dataclass
class ExportState:
    """What the helpers recorded while one model was traced."""

    tracing_state: Any
    annotations: list[dict[str, AttrValue]] = field(default_factory=list)
    anchors: list[Anchor] = field(default_factory=list)
    n_anchor_pairs: int = 0
    n_gradients: int = 0


@dataclass
class Running:
    """The running export: one at a time, as torch's tracer and exporter allow."""

    state: ExportState | None = None
    param_names: set[str] = field(default_factory=set)  # its graph inputs that are parameters

    def reset(self) -> None:
        self.state = None
        self.param_names = set()


RUNNING = Running()


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


def current() -> ExportState:
    """The state of the export tracing the model now, new at its first use."""
    tracing_state = torch._C._get_tracing_state()
    state = RUNNING.state
    if state is None or state.tracing_state is not tracing_state:
        state = RUNNING.state = ExportState(tracing_state)
    return state


def traced_graph() -> Any:
    """The graph being traced."""
    return torch._C._get_tracing_state().graph()


def all_nodes(block: Any) -> Iterator[torch._C.Node]:
    """The nodes of ``block`` (a graph or a block), those in their blocks too, in order."""
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from all_nodes(sub)


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


def set_attrs(node: torch._C.Node, attrs: dict[str, AttrValue]) -> None:
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
