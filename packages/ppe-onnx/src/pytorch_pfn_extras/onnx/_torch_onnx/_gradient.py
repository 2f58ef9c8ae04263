"""The ONNX ``Gradient`` operator (domain ``ai.onnx.preview.training``) of :func:`gradient`.

``Gradient`` names the values it differentiates instead of reading them: the names are
written in by :func:`finish_gradients` once the exporter has given the values their final
names, at the end of the export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pytorch_pfn_extras.onnx._torch_onnx._graph import (
    TAG_GRADIENT,
    TAG_GRADIENT_Y,
    all_nodes,
    current,
)

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
    state = current()
    index = state.n_gradients
    state.n_gradients += 1
    outputs = _GradientFunction.apply(len(xs), index, y, *xs, *grads)  # type: ignore[no-untyped-call]
    return tuple(outputs) if isinstance(outputs, tuple) else (outputs,)


def finish_gradients(graph: torch._C.Graph) -> None:
    """Write the final names of their values into the Gradient nodes; drop the keep-alives."""
    nodes = list(all_nodes(graph))
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
