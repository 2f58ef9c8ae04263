"""``ppe.compile``: a module's forward (and backward) compiled by a backend.

With an optimizer, one graph with the forward and the backward is captured below autograd
(``make_fx`` with fake tensors), so it holds ATen operators, the backward ones included; a
backend built for whole training steps (a device compiler) receives it in one piece. Without
one, the forward and backward graphs are captured by AOTAutograd, and autograd runs around
the compiled forward. Nothing heavy is imported before ``compile`` is called.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytorch_pfn_extras.runtime._base import type_name

if TYPE_CHECKING:
    from typing import TypeAlias

    from torch._functorch._aot_autograd.schemas import AOTDispatchCompiler

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
class _Outputs:
    """Where the module's output puts its tensors; learnt while the graph is traced.

    The graph returns the tensor leaves of the output, in order; the rest of the output
    (its structure and non-tensor leaves) is the same at every call.
    """

    spec: pytree.TreeSpec | None = None
    leaves: list[Any] = dataclasses.field(default_factory=list)  # tensor places: None
    places: list[int] = dataclasses.field(default_factory=list)

    def learn(self, out: Any) -> list[torch.Tensor]:
        """Record the layout of ``out`` (traced); return its tensor leaves."""
        out_leaves, self.spec = pytree.tree_flatten(out)
        self.places = [i for i, leaf in enumerate(out_leaves) if isinstance(leaf, torch.Tensor)]
        self.leaves = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in out_leaves]
        return [out_leaves[i] for i in self.places]

    def rebuild(self, tensors: list[Any]) -> Any:
        """The module's output, with ``tensors`` in the tensor places."""
        assert self.spec is not None  # learnt by the first call
        out_leaves = list(self.leaves)
        for place, value in zip(self.places, tensors):
            out_leaves[place] = value
        return pytree.tree_unflatten(out_leaves, self.spec)


@dataclasses.dataclass
class _Step:
    """A compiled graph and how to read its flat outputs.

    The graph returns the tensor leaves of the module's output, then (with ``mode ==
    "joint"``) the gradients of ``grad_targets``, the graph inputs that were differentiated
    and got a gradient.
    """

    run: Callable[..., Any]
    outputs: _Outputs
    grad_targets: list[int] = dataclasses.field(default_factory=list)


# How a call runs (see ``compile``): the optimizer step's forward and backward in one graph;
# a differentiable forward (``autograd``, backward graph compiled on the first backward);
# the forward alone.
_JOINT, _AUTOGRAD, _FORWARD = "joint", "autograd", "forward"

_NON_LEAF_GRAD_WARNING = "The .grad attribute of a Tensor that is not a leaf Tensor"


@contextlib.contextmanager
def _unsupported_data_dependence() -> Iterator[None]:
    """Report what one static graph cannot capture as ``torch.compile(fullgraph=True)`` does."""
    try:
        yield
    except RuntimeError as exc:
        from torch._subclasses.fake_tensor import (
            DataDependentOutputException,
            DynamicOutputShapeException,
        )
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        data_dependent = (
            DataDependentOutputException,
            DynamicOutputShapeException,
            GuardOnDataDependentSymNode,
        )
        if not isinstance(exc, data_dependent):
            raise
        import torch._dynamo.exc  # only now: it is the heaviest part of torch

        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = (
            "ppe.compile: the module's control flow (or an output's shape) depends on tensor "
            "values, which one static graph cannot capture, as with "
            f"torch.compile(fullgraph=True); {type(exc).__name__}: {detail}"
        )
        raise torch._dynamo.exc.Unsupported(message) from exc


def _boxed(backend: Backend) -> AOTDispatchCompiler:
    """``backend`` as an AOTAutograd compiler, whose compiled functions take a list."""

    def compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        from torch._functorch._aot_autograd.utils import make_boxed_func

        with torch.no_grad():  # the graph is already differentiated: no autograd around it
            compiled = backend(gm, list(example_inputs))
        # A torch.compile backend returns a function of the unpacked inputs.
        return make_boxed_func(compiled)

    return compiler


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
        """Run the compiled graph; with an optimizer, set the gradients and step it."""
        state = [*self.module.named_parameters(), *self.module.named_buffers()]
        leaves, in_spec = pytree.tree_flatten((args, kwargs))
        places = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        tensors: list[torch.Tensor] = [leaves[i] for i in places]
        mode = _FORWARD
        if self._generate_backward and torch.is_grad_enabled():
            mode = _AUTOGRAD if self._optimizer is None else _JOINT
        constants = tuple(None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
        key = (
            mode,
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
        if mode == _AUTOGRAD:
            # Autograd runs around the compiled forward: it sees the parameters and inputs
            # themselves, and the backward pass continues through them.
            inputs = [t for _, t in state] + tensors
            if step is None:
                step = self._steps[key] = self._compile_autograd(state, leaves, in_spec, places)
                with _unsupported_data_dependence(), warnings.catch_warnings():
                    # Tracing reads ``.grad`` of non-leaf inputs; torch hides the warning
                    # that raises, except where warnings are errors.
                    warnings.filterwarnings("ignore", _NON_LEAF_GRAD_WARNING, UserWarning)
                    results = list(step.run(*inputs))
            else:
                results = list(step.run(*inputs))
            return step.outputs.rebuild(results)
        # The graph computes its own gradients: the inputs it sees are detached.
        inputs = [t for _, t in state] + [
            t.detach().requires_grad_(t.requires_grad) for t in tensors
        ]
        if step is None:
            step = self._trace(state, leaves, in_spec, places, inputs, mode == _JOINT)
            self._steps[key] = step
        with torch.no_grad():
            results = list(step.run(*[t.detach() for t in inputs]))
        n_out = len(step.outputs.places)
        if mode == _JOINT:
            self._apply_gradients(state, tensors, step.grad_targets, results[n_out:])
        return step.outputs.rebuild(results[:n_out])

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

    def _call_module(
        self,
        names: list[str],
        leaves: list[Any],
        in_spec: pytree.TreeSpec,
        places: list[int],
        flat: tuple[torch.Tensor, ...],
    ) -> Any:
        """The module's output for ``flat``: its parameters and buffers, then its inputs."""
        call_leaves = list(leaves)
        for place, tensor in zip(places, flat[len(names) :]):
            call_leaves[place] = tensor
        call_args, call_kwargs = pytree.tree_unflatten(call_leaves, in_spec)
        parameters_and_buffers = dict(zip(names, flat[: len(names)]))
        return torch.func.functional_call(
            self.module, parameters_and_buffers, tuple(call_args), call_kwargs
        )

    def _compile_autograd(
        self,
        state: list[tuple[str, torch.Tensor]],
        leaves: list[Any],
        in_spec: pytree.TreeSpec,
        places: list[int],
    ) -> _Step:
        """A differentiable compiled forward; traced and compiled by its first call."""
        from torch._functorch.aot_autograd import aot_function

        names = [name for name, _ in state]
        outputs = _Outputs()

        def forward(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(outputs.learn(self._call_module(names, leaves, in_spec, places, flat)))

        compiler = _boxed(self._backend)
        run = aot_function(
            forward,
            fw_compiler=compiler,
            bw_compiler=compiler,
            decompositions=self._decompositions,
        )
        return _Step(run, outputs)

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
        wrt = [i for i, t in enumerate(inputs) if t.requires_grad]
        outputs = _Outputs()
        grad_targets: list[int] = []

        def joint(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            outs = outputs.learn(self._call_module(names, leaves, in_spec, places, flat))
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
            grad_targets[:] = [i for i, g in zip(wrt, grads) if g is not None]
            return (*(t.detach() for t in outs), *(g for g in grads if g is not None))

        with _unsupported_data_dependence():
            graph = make_fx(joint, self._decompositions, tracing_mode="fake")(*inputs)
        with torch.no_grad():  # the graph is already differentiated: no autograd around it
            run = self._backend(graph, [t.detach() for t in inputs])
        return _Step(run, outputs, grad_targets)


def compile(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    backend: str | Backend | None = None,
    *,
    generate_backward: bool = True,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> torch.nn.Module:
    """Compile a module's forward, and backward, with ``backend``.

    Without ``optimizer``, calling the returned module runs the compiled forward and, as in
    PPE 0.9, returns outputs that autograd differentiates (``grad_fn`` set):
    ``loss.backward()`` runs the compiled backward graph (compiled by ``backend`` at the
    first backward) and accumulates the gradients as the eager module would. With
    ``optimizer`` (and ``generate_backward=True``, grad mode on) each call runs one graph
    that holds the forward *and* the backward pass, backpropagating from the module's outputs
    (as ``torch.autograd.backward(outputs, ones)``, i.e. ``loss.backward()`` for a scalar
    loss); the gradients are set in the parameters' ``.grad`` (inputs that require grad get
    theirs too), after clearing them, and the optimizer is stepped: one call is a whole
    training step, and its outputs are detached. Under ``torch.no_grad()``, or with
    ``generate_backward=False``, the graph holds only the forward pass and the outputs are
    detached.

    Graphs are traced with fake tensors on the first call (nothing runs eagerly), below
    autograd: they hold ATen operators (``decompositions`` rewritten), parameters, buffers
    and inputs as placeholders, and in-place buffer updates (BatchNorm statistics). They are
    traced again for inputs of another shape, dtype, device or layout, for other non-tensor
    arguments, and when a submodule switches between ``train()`` and ``eval()``. As with
    ``torch.compile(fullgraph=True)``, control flow that depends on tensor values cannot be
    captured: it raises ``torch._dynamo.exc.Unsupported``.

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
        generate_backward: Compile the backward pass too (and, with ``optimizer``, run it
            and the optimizer step in each call).
        decompositions: ATen operator -> decomposition function, applied while tracing
            (``torch._decomp.core_aten_decompositions()`` for a core-ATen-only graph).

    Returns:
        The compiled module.

    Raises:
        ValueError: ``optimizer`` with ``generate_backward=False``, or an unknown backend
            name; on the first call with ``optimizer``, a module without outputs that
            require grad.
        TypeError: ``module``, ``optimizer`` or ``backend`` of the wrong type.
        torch._dynamo.exc.Unsupported: On a call that traces, control flow that depends on
            tensor values.

    Example:
        >>> step = ppe.compile(model, optimizer)
        >>> for x, t in loader:
        ...     loss = step(x, t)  # forward, backward and optimizer step
        >>> compiled = ppe.compile(model)
        >>> compiled(x).sum().backward()  # a differentiable compiled forward
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
