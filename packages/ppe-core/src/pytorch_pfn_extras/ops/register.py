"""``register``: define a differentiable custom operator ``torch.ops.ppe.<name>``.

Three operators are defined in the ``ppe`` namespace for each registered name:

- ``ppe::<name>``: what users call; it calls ``ppe::<name>_fwd`` (a composite operator, so
  traced graphs hold ``ppe::<name>_fwd`` in its place);
- ``ppe::<name>_fwd``: the forward, differentiable (its backward calls ``ppe::<name>_bwd``);
- ``ppe::<name>_bwd``: the backward, callable on its own.

``_fwd`` and ``_bwd`` have a kernel for every device (``CompositeExplicitAutograd``) and a
fake/meta kernel (the ``meta`` function of their :class:`OpDesc`), so meta tensors,
``torch.compile``, ``torch.export`` and ``ppe.compile`` trace through them without running
them. As in PPE 0.9, the forward graph of a traced model holds the operator as one node
``torch.ops.ppe.<name>_fwd.default`` and its backward graph as
``torch.ops.ppe.<name>_bwd.default``, which a backend can map to its own kernels.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

NAMESPACE = "ppe"

_lock = threading.Lock()
_library: torch.library.Library | None = None


@dataclasses.dataclass(frozen=True)
class OpDesc:
    """One implementation of a custom operator: what it computes, and the shapes it returns.

    Attributes:
        op: The implementation, called with real tensors on any device.
        meta: The shape function, called instead of ``op`` with meta or fake tensors (tracing,
            ``torch.compile``): it returns empty tensors with the shapes, dtypes and devices
            ``op`` would return (``torch.empty_like(a)``...) and computes nothing.
        signature: The operator's schema without its name, in TorchScript schema syntax:
            ``"(Tensor a, Tensor b) -> Tensor"``, ``"(Tensor x, float alpha) -> (Tensor, Tensor)"``.

    Example:
        >>> OpDesc(lambda a, b: a * b, lambda a, b: torch.empty_like(a), "(Tensor a, Tensor b) -> Tensor")
    """

    op: Callable[..., Any]
    meta: Callable[..., Any]
    signature: str


def _get_library() -> torch.library.Library:
    global _library
    if _library is None:  # created on first use: importing PPE registers nothing
        # torch.library's classic API is untyped.
        _library = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    return _library


def _check_signature(name: str, desc: Any, argument: str) -> torch._C.FunctionSchema:
    if not isinstance(desc, OpDesc):
        message = f"{argument} must be a ppe.ops.OpDesc, got {type(desc).__name__}"
        raise TypeError(message)
    if not (callable(desc.op) and callable(desc.meta)):
        message = f"{argument}.op and {argument}.meta must be callables, got {desc.op!r} and {desc.meta!r}"
        raise TypeError(message)
    try:
        schema = torch._C.parse_schema(f"{NAMESPACE}::{name}{desc.signature}")
    except RuntimeError as exc:
        message = (
            f"{argument}.signature {desc.signature!r} is not an operator schema such as "
            f"'(Tensor a, Tensor b) -> Tensor': {exc}"
        )
        raise ValueError(message) from exc
    if schema.is_mutable or any(arg.alias_info is not None for arg in schema.arguments):
        message = (
            f"{argument}.signature {desc.signature!r} mutates or aliases an argument; "
            f"register() defines functional operators only"
        )
        raise ValueError(message)
    return schema


def _make_backward(name: str, n_outputs: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Return ``(setup_context, backward)`` for ``torch.library.register_autograd``."""
    bwd_name = f"{name}_bwd"

    def setup_context(ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        tensors = [value for value in inputs if isinstance(value, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        # Non-tensor arguments (floats, ints...) are kept as they are; tensors are restored
        # from saved_tensors, so the saved-tensor checks of autograd apply to them.
        ctx.ppe_is_tensor = [isinstance(value, torch.Tensor) for value in inputs]
        ctx.ppe_constants = [None if isinstance(value, torch.Tensor) else value for value in inputs]

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        inputs = [
            next(saved) if is_tensor else constant
            for is_tensor, constant in zip(ctx.ppe_is_tensor, ctx.ppe_constants)
        ]
        result = getattr(torch.ops.ppe, bwd_name)(*grads[:n_outputs], *inputs)
        results = (result,) if isinstance(result, torch.Tensor) else tuple(result)
        expected = sum(ctx.ppe_is_tensor)
        if len(results) != expected:
            message = (
                f"ppe::{bwd_name} returned {len(results)} gradient(s), but ppe::{name} has "
                f"{expected} tensor argument(s); return one gradient per tensor argument"
            )
            raise RuntimeError(message)
        returned = iter(results)
        return tuple(next(returned) if is_tensor else None for is_tensor in ctx.ppe_is_tensor)

    return setup_context, backward


def register(name: str, fwd_op: OpDesc, bwd_op: OpDesc) -> Any:
    """Register a custom operator with its forward and backward in ``torch.library``.

    Defines ``torch.ops.ppe.<name>`` (differentiable), ``torch.ops.ppe.<name>_fwd`` and
    ``torch.ops.ppe.<name>_bwd``. The backward operator is called with the gradients of the
    forward's outputs followed by the forward's arguments, and returns one gradient per
    tensor argument of the forward, in order (non-tensor arguments get no gradient). In
    graphs traced from a model that calls the operator (``torch.compile``, ``ppe.compile``,
    ``torch.export``, ``make_fx``), the forward is the node ``ppe.<name>_fwd`` and the
    backward the node ``ppe.<name>_bwd``.

    Args:
        name: The operator name, a Python identifier; unique within the ``ppe`` namespace for
            the life of the process (torch cannot unregister it).
        fwd_op: The forward: ``signature`` is the operator's schema, such as
            ``"(Tensor a, Tensor b) -> Tensor"``.
        bwd_op: The backward: its schema takes the output gradients, then the forward's
            arguments, such as ``"(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)"``.

    Returns:
        The new operator, ``torch.ops.ppe.<name>``.

    Raises:
        ValueError: ``name`` is not an identifier or is already registered, or a signature is
            not a valid schema or mutates its arguments.
        TypeError: ``fwd_op`` or ``bwd_op`` is not an ``OpDesc`` of callables.

    Example:
        >>> mul = register(
        ...     "mul",
        ...     OpDesc(lambda a, b: a * b, lambda a, b: torch.empty_like(a),
        ...            "(Tensor a, Tensor b) -> Tensor"),
        ...     OpDesc(lambda g, a, b: (g * b, g * a),
        ...            lambda g, a, b: (torch.empty_like(a), torch.empty_like(b)),
        ...            "(Tensor g, Tensor a, Tensor b) -> (Tensor, Tensor)"),
        ... )
        >>> mul(x, y).sum().backward()
    """
    if not isinstance(name, str) or not name.isidentifier():
        message = f"an operator name must be a Python identifier, got {name!r}"
        raise ValueError(message)
    schema = _check_signature(name, fwd_op, "fwd_op")
    _check_signature(f"{name}_bwd", bwd_op, "bwd_op")
    names = (name, f"{name}_fwd", f"{name}_bwd")
    with _lock:
        taken = [f"{NAMESPACE}::{op}" for op in names if hasattr(torch.ops.ppe, op)]
        if taken:
            message = f"operator(s) {taken} are already registered; choose another name"
            raise ValueError(message)
        library = _get_library()
        for op, desc in zip(names[1:], (fwd_op, bwd_op)):
            library.define(f"{op}{desc.signature}")  # type: ignore[no-untyped-call]
            library.impl(op, desc.op, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
            torch.library.register_fake(f"{NAMESPACE}::{op}", desc.meta, lib=library)
        setup_context, backward = _make_backward(name, len(schema.returns))
        torch.library.register_autograd(
            f"{NAMESPACE}::{name}_fwd", backward, setup_context=setup_context, lib=library
        )
        # ``ppe::<name>`` decomposes into ``ppe::<name>_fwd`` wherever it is traced.
        library.define(f"{name}{fwd_op.signature}")  # type: ignore[no-untyped-call]
        library.impl(  # type: ignore[no-untyped-call]
            name, getattr(torch.ops.ppe, names[1]), "CompositeImplicitAutograd"
        )
    return getattr(torch.ops.ppe, name)
