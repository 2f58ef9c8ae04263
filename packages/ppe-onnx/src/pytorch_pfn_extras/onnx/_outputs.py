"""``as_output``, ``no_grad`` and ``grad``: helpers called in a model's ``forward``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

_T = TypeVar("_T")


def _exporting() -> bool:
    return bool(torch.onnx.is_in_onnx_export()) and torch._C._get_tracing_state() is not None


def as_output(name: str, value: torch.Tensor, add_identity: bool = True) -> torch.Tensor:
    """Export ``value`` as an extra output of the ONNX graph, named ``name``.

    The extra outputs follow the model's own outputs, in the order of the calls. Outside an
    export ``value`` is returned as it is. Use the returned tensor in the rest of ``forward``.

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
    if not _exporting():
        return value
    from pytorch_pfn_extras.onnx import _torch_onnx_symbolic

    _torch_onnx_symbolic.install()
    return _torch_onnx_symbolic.mark_output(value, name, add_identity)


def no_grad(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Call ``fn(*args, **kwargs)`` with gradients off, in PyTorch and in the exported graph."""
    with torch.no_grad():
        return fn(*args, **kwargs)


def grad(
    output: torch.Tensor | Sequence[torch.Tensor],
    inputs: torch.Tensor | Sequence[torch.Tensor],
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool = False,
) -> tuple[torch.Tensor, ...]:
    """The gradients of ``output`` with respect to ``inputs``, as ``torch.autograd.grad``.

    PPE exports this as the ONNX ``Gradient`` operator (``ai.onnx.preview.training``), which
    onnxruntime's inference build does not run; torch 2.13's exporter gives no hook to build
    it, so inside an export this raises ``NotImplementedError``.
    """
    if _exporting():
        message = (
            "ppe.onnx.grad cannot be exported with torch "
            f"{torch.__version__}: the ONNX Gradient operator is not emitted by this version; "
            "compute the gradient outside the exported model"
        )
        raise NotImplementedError(message)
    del only_inputs  # always True in torch.autograd.grad
    return torch.autograd.grad(
        output,
        inputs,
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=allow_unused,
    )
