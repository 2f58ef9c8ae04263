"""``as_output``, ``no_grad`` and ``grad``: helpers called in a model's ``forward``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import torch

from pytorch_pfn_extras.onnx import _torch_onnx
from pytorch_pfn_extras.onnx._inputs import detached

_T = TypeVar("_T")


def as_output(name: str, value: torch.Tensor, add_identity: bool = True) -> torch.Tensor:
    """Export ``value`` as an extra output of the ONNX graph, named ``name``.

    The extra outputs follow the model's own outputs, in the order of the calls. Outside an
    export ``value`` is returned as it is, and in ``torch.onnx.export`` called directly too
    (with a ``UserWarning``: only ppe-onnx's ``export`` and ``export_testcase`` hook into the
    exporter). Use the returned tensor in the rest of ``forward``.

    Args:
        name: Name of the graph output.
        value: The tensor to output.
        add_identity: Output an ``Identity`` node named ``name`` reading ``value``; ``False``
            renames the value itself.

    Returns:
        ``value``.
    """
    if not isinstance(value, torch.Tensor):
        message = f"as_output({name!r}, ...) needs a torch.Tensor, got {type(value).__name__}"
        raise TypeError(message)
    if not _torch_onnx.records("as_output", stacklevel=2):
        return value
    return _torch_onnx.mark_output(value, name, add_identity)


def no_grad(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Call ``fn(*args, **kwargs)`` with gradients off, in PyTorch and in the exported graph.

    Every tensor returned is detached, also in tuples, lists and dict values (nested; the
    containers keep their types), so that none requires gradients, even one that ``fn``
    returns as it got it.
    """
    with torch.no_grad():
        result = fn(*args, **kwargs)
    return cast(_T, detached(result))


def grad(
    output: torch.Tensor | Sequence[torch.Tensor],
    inputs: torch.Tensor | Sequence[torch.Tensor],
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool = False,
) -> tuple[torch.Tensor, ...]:
    """The gradients of ``output`` with respect to ``inputs``, as ``torch.autograd.grad``.

    The output gradients are ones (``grad_outputs=ones_like(output)``), so a non-scalar
    ``output`` gives the gradients of its sum.

    In an export (:func:`~pytorch_pfn_extras.onnx.export`, ``export_testcase``) the gradients
    become an ONNX ``Gradient`` node (domain ``ai.onnx.preview.training``, opset 1) naming
    ``output`` as its ``y`` (a ``ReduceSum`` of it if it is not a scalar) and ``inputs`` as its
    ``xs``, for runtimes that differentiate graphs (onnxruntime's inference build does not run
    it). ``output`` must then be one tensor. In ``torch.onnx.export`` called directly, which
    runs without ppe-onnx's hooks, it raises ``RuntimeError``.
    """
    outputs = [output] if isinstance(output, torch.Tensor) else list(output)
    xs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    del only_inputs  # always True in torch.autograd.grad
    if not _torch_onnx.in_export():
        return torch.autograd.grad(
            outputs,
            xs,
            grad_outputs=[torch.ones_like(o) for o in outputs],
            retain_graph=retain_graph,
            create_graph=create_graph,
            allow_unused=allow_unused,
        )
    if len(outputs) != 1:
        message = (
            "the ONNX Gradient operator differentiates one output; grad() got "
            f"{len(outputs)} in an export: sum them first"
        )
        raise ValueError(message)
    if not _torch_onnx.hooked():
        message = (
            "grad() in torch.onnx.export called directly cannot export its Gradient node; "
            "export with pytorch_pfn_extras.onnx.export or export_testcase, which hook into "
            "torch's exporter for the duration of the export"
        )
        raise RuntimeError(message)
    (y,) = outputs
    with _torch_onnx.untraced():
        grads = torch.autograd.grad(
            y,
            xs,
            grad_outputs=torch.ones_like(y),
            retain_graph=True,
            create_graph=create_graph,
            allow_unused=allow_unused,
        )
    if any(g is None for g in grads):
        unused = [i for i, g in enumerate(grads) if g is None]
        message = f"grad(): inputs {unused} do not reach the output; the ONNX Gradient operator needs a path"
        raise ValueError(message)
    # Gradient differentiates a scalar: the sum, whose gradients are those for output
    # gradients of ones (traced, so that the graph computes it).
    return _torch_onnx.gradient(y if y.dim() == 0 else y.sum(), xs, grads)
