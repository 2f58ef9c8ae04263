"""``ppe.compile``: one graph with a module's forward and backward, compiled by a backend.

The graph is captured below autograd (``make_fx`` with fake tensors), so it holds ATen
operators, the backward ones included; a backend built for whole training steps (a device
compiler) receives it in one piece. Nothing heavy is imported before ``compile`` is called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytorch_pfn_extras.runtime._base import type_name

if TYPE_CHECKING:
    from typing import TypeAlias

    Backend: TypeAlias = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]


def _tensor_key(tensor: torch.Tensor) -> Hashable:
    return (
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
        tensor.device,
        tensor.requires_grad,
    )


def _resolve_backend(backend: str | Backend | None) -> Backend:
    if backend is None:
        backend = "inductor"  # torch.compile's default
    if isinstance(backend, str):
        import torch._dynamo  # only now: it is the heaviest part of torch

        try:
            found: Backend = torch._dynamo.lookup_backend(backend)
        except torch._dynamo.exc.InvalidBackend as exc:
            message = (
                f"unknown compiler backend {backend!r}; known: {torch._dynamo.list_backends()}"
            )
            raise ValueError(message) from exc
        return found
    if callable(backend):
        return backend
    message = (
        f"backend must be a backend name such as 'inductor', a callable "
        f"backend(graph_module, example_inputs) -> callable, or None; got {type_name(backend)}"
    )
    raise TypeError(message)


@dataclasses.dataclass
class _Step:
    """A compiled graph and how to read its flat outputs.

    The graph returns the tensor leaves of the module's output, then (when it includes the
    backward) the gradients of ``grad_targets``, the graph inputs that were differentiated and
    got a gradient.
    """

    run: Callable[..., Any]
    out_spec: pytree.TreeSpec
    out_leaves: list[Any]  # non-tensor leaves of the output; tensor places are filled per call
    tensor_places: list[int]
    grad_targets: list[int]


class _CompiledModule(torch.nn.Module):
    """The module returned by ``ppe.compile``; the original is its ``module`` attribute."""

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        backend: Backend,
        generate_backward: bool,
        decompositions: Mapping[Any, Callable[..., Any]] | None,
    ) -> None:
        super().__init__()
        self.module = module
        self._optimizer = optimizer
        self._backend = backend
        self._generate_backward = generate_backward
        self._decompositions = dict(decompositions) if decompositions else None
        self._steps: dict[Hashable, _Step] = {}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled graph; with the backward, set gradients and step the optimizer."""
        state = [*self.module.named_parameters(), *self.module.named_buffers()]
        leaves, in_spec = pytree.tree_flatten((args, kwargs))
        places = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        tensors: list[torch.Tensor] = [leaves[i] for i in places]
        backward = self._generate_backward and torch.is_grad_enabled()
        constants = tuple(None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
        key = (
            backward,
            tuple(m.training for m in self.module.modules()),  # a submodule may differ
            in_spec,
            constants,
            tuple(_tensor_key(t) for t in tensors),
            tuple((name, _tensor_key(t)) for name, t in state),
        )
        try:
            step = self._steps.get(key)
        except TypeError:
            message = f"ppe.compile: non-tensor arguments must be hashable, got {constants!r}"
            raise TypeError(message) from None
        # The graph computes its own gradients: the inputs it sees are detached.
        inputs = [t for _, t in state] + [
            t.detach().requires_grad_(t.requires_grad) for t in tensors
        ]
        if step is None:
            step = self._trace(state, leaves, in_spec, places, inputs, backward)
            self._steps[key] = step
        with torch.no_grad():
            results = list(step.run(*[t.detach() for t in inputs]))
        n_out = len(step.tensor_places)
        out_leaves = list(step.out_leaves)
        for place, value in zip(step.tensor_places, results[:n_out]):
            out_leaves[place] = value
        if backward:
            self._apply_gradients(state, tensors, step.grad_targets, results[n_out:])
        return pytree.tree_unflatten(out_leaves, step.out_spec)

    def _apply_gradients(
        self,
        state: list[tuple[str, torch.Tensor]],
        tensors: list[torch.Tensor],
        targets: list[int],
        grads: list[torch.Tensor],
    ) -> None:
        if self._optimizer is not None:
            self._optimizer.zero_grad()
        upstream: list[tuple[torch.Tensor, torch.Tensor]] = []
        for index, grad in zip(targets, grads):
            if index < len(state):  # a parameter: accumulate, as backward() does
                param = state[index][1]
                param.grad = grad if param.grad is None else param.grad + grad
            else:  # an input that requires grad: continue the backward pass through it
                upstream.append((tensors[index - len(state)], grad))
        if upstream:
            torch.autograd.backward([t for t, _ in upstream], [g for _, g in upstream])
        if self._optimizer is not None:
            self._optimizer.step()

    def _trace(
        self,
        state: list[tuple[str, torch.Tensor]],
        leaves: list[Any],
        in_spec: pytree.TreeSpec,
        places: list[int],
        inputs: list[torch.Tensor],
        backward: bool,
    ) -> _Step:
        from torch.fx.experimental.proxy_tensor import make_fx

        names = [name for name, _ in state]
        n_state = len(names)
        wrt = [i for i, t in enumerate(inputs) if t.requires_grad]
        found: dict[str, Any] = {}

        def joint(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            call_leaves = list(leaves)
            for place, tensor in zip(places, flat[n_state:]):
                call_leaves[place] = tensor
            call_args, call_kwargs = pytree.tree_unflatten(call_leaves, in_spec)
            parameters_and_buffers = dict(zip(names, flat[:n_state]))
            out = torch.func.functional_call(
                self.module, parameters_and_buffers, tuple(call_args), call_kwargs
            )
            out_leaves, found["spec"] = pytree.tree_flatten(out)
            found["places"] = [
                i for i, leaf in enumerate(out_leaves) if isinstance(leaf, torch.Tensor)
            ]
            found["leaves"] = [None if isinstance(v, torch.Tensor) else v for v in out_leaves]
            outs = [out_leaves[i] for i in found["places"]]
            found["targets"] = []
            if not backward:
                return tuple(t.detach() for t in outs)
            roots = [t for t in outs if t.requires_grad]
            if not roots:
                message = (
                    "ppe.compile(generate_backward=True): no output of the module requires grad, "
                    "so there is nothing to backpropagate; does it have trainable parameters?"
                )
                raise ValueError(message)
            grads = torch.autograd.grad(
                roots,
                [flat[i] for i in wrt],
                [torch.ones_like(t) for t in roots],
                allow_unused=True,
            )
            found["targets"] = [i for i, g in zip(wrt, grads) if g is not None]
            return (*(t.detach() for t in outs), *(g for g in grads if g is not None))

        graph = make_fx(joint, self._decompositions, tracing_mode="fake")(*inputs)
        with torch.no_grad():  # the graph is already differentiated: no autograd around it
            run = self._backend(graph, [t.detach() for t in inputs])
        return _Step(run, found["spec"], found["leaves"], found["places"], found["targets"])


def compile(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    backend: str | Backend | None = None,
    *,
    generate_backward: bool = True,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> torch.nn.Module:
    """Compile a module's forward and backward into one graph with ``backend``.

    Calling the returned module runs one compiled graph. With ``generate_backward=True``
    (and grad mode on) the graph holds the forward *and* the backward pass: each call
    backpropagates from the module's outputs (as ``torch.autograd.backward(outputs,
    ones)``, i.e. ``loss.backward()`` for a scalar loss), accumulates the gradients into the
    parameters' ``.grad`` (inputs that require grad get theirs too), and, when ``optimizer``
    is given, clears the gradients first and steps the optimizer after: one call is a whole
    training step. Under ``torch.no_grad()``, or with ``generate_backward=False``, the graph
    holds only the forward pass. Outputs are returned detached either way.

    The graph is traced with fake tensors on the first call (nothing runs eagerly), below
    autograd: it holds ATen operators (``decompositions`` rewritten), parameters, buffers and
    inputs as placeholders, and in-place buffer updates (BatchNorm statistics) as in-place
    operators on them. It is traced again for inputs of another shape, dtype, device or
    layout, for other non-tensor arguments, and when a submodule switches between
    ``train()`` and ``eval()``. As with ``torch.compile(fullgraph=True)``, control flow that
    depends on tensor values cannot be captured.

    Unlike PPE 0.9, the optimizer step is not traced into the graph: it runs eagerly right
    after it, because optimizers keep Python-side state (step counts, buffers created on the
    first step) that a static graph would freeze.

    Args:
        module: The module to compile; the returned module holds it as ``.module`` (so state
            dict keys gain a ``module.`` prefix) and shares its parameters.
        optimizer: An optimizer of ``module``'s parameters, stepped by each call.
        backend: A ``torch.compile`` backend name (``"inductor"``, the default, ``"eager"``,
            ``"aot_eager"``...) or a callable ``backend(graph_module, example_inputs)``
            returning the function to run, as for ``torch.compile``.
        generate_backward: Include the backward pass (and the optimizer step) in each call.
        decompositions: ATen operator -> decomposition function, applied while tracing
            (``torch._decomp.core_aten_decompositions()`` for a core-ATen-only graph).

    Returns:
        The compiled module.

    Raises:
        ValueError: ``optimizer`` with ``generate_backward=False``, or an unknown backend
            name; on the first call, a module without outputs that require grad.
        TypeError: ``module``, ``optimizer`` or ``backend`` of the wrong type.

    Example:
        >>> step = ppe.compile(model, optimizer)
        >>> for x, t in loader:
        ...     loss = step(x, t)  # forward, backward and optimizer step
    """
    if not isinstance(module, torch.nn.Module):
        message = f"ppe.compile() expects a torch.nn.Module, got {type_name(module)}"
        raise TypeError(message)
    if optimizer is not None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            message = f"optimizer must be a torch.optim.Optimizer, got {type_name(optimizer)}"
            raise TypeError(message)
        if not generate_backward:
            message = "an optimizer can only be compiled in with generate_backward=True"
            raise ValueError(message)
    return _CompiledModule(
        module, optimizer, _resolve_backend(backend), generate_backward, decompositions
    )
