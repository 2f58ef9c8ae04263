"""PPE 0.9 user code: ``ppe.compile`` without an optimizer, and ``ppe.ops.register`` graphs.

``ppe.compile`` is ``ppe.runtime.compile`` here: ppe-core's tests run without the meta-package,
which re-exports it.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
import torch
import torch._dynamo
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.fx.experimental.proxy_tensor import make_fx

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.ops
import pytorch_pfn_extras.runtime

_ids = itertools.count()


class RecordingBackend:
    """A torch.compile-style backend that keeps the graphs it gets and runs them as they are."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs.append(gm)
        return gm.forward


def _targets(gm: torch.fx.GraphModule) -> set[str]:
    return {str(node.target) for node in gm.graph.nodes if node.op == "call_function"}


def make_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
    )


# -- ppe.compile without an optimizer -----------------------------------------------------


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "callable"])
def test_compiled_forward_without_optimizer_backpropagates_like_eager(backend: str) -> None:
    model, reference = make_model(), make_model()
    compiled = ppe.runtime.compile(
        model, backend=RecordingBackend() if backend == "callable" else backend
    )
    for step in range(2):
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(step))
        out = compiled(x)
        expected = reference(x)
        assert out.grad_fn is not None
        if step == 0:  # the call computes no gradient by itself
            assert all(param.grad is None for param in model.parameters())
        out.sum().backward()  # the user's backward, as in eager code
        expected.sum().backward()
        torch.testing.assert_close(out, expected)
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)  # accumulated over both steps
    torch.testing.assert_close(model.state_dict(), reference.state_dict())  # BatchNorm stats


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor imports torch.jit APIs
def test_the_default_backend_compiles_a_differentiable_forward() -> None:
    model, reference = make_model(), make_model()
    x = torch.randn(8, 4)
    out = ppe.runtime.compile(model)(x)
    expected = reference(x)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)


def test_compiled_forward_is_differentiable_through_its_inputs_and_any_loss() -> None:
    model, reference = make_model(), make_model()
    upstream = torch.nn.Linear(3, 4)
    reference_upstream = copy.deepcopy(upstream)
    compiled = ppe.runtime.compile(model, backend=RecordingBackend())
    x = torch.randn(8, 3)
    loss = compiled(upstream(x)).pow(2).mean()
    reference_loss = reference(reference_upstream(x)).pow(2).mean()
    loss.backward()
    reference_loss.backward()
    torch.testing.assert_close(upstream.weight.grad, reference_upstream.weight.grad)
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)


def test_the_backend_compiles_the_forward_then_the_backward_on_the_first_backward() -> None:
    backend = RecordingBackend()
    compiled = ppe.runtime.compile(make_model(), backend=backend)
    out = compiled(torch.randn(8, 4))
    assert len(backend.graphs) == 1
    assert "aten.addmm.default" in _targets(backend.graphs[0])
    assert not any("backward" in target for target in _targets(backend.graphs[0]))
    out.sum().backward()
    assert len(backend.graphs) == 2
    assert "aten.threshold_backward.default" in _targets(backend.graphs[1])
    compiled(torch.randn(8, 4)).sum().backward()  # the same shapes: nothing compiled again
    assert len(backend.graphs) == 2


def test_no_grad_and_generate_backward_false_return_outputs_without_grad_fn() -> None:
    compiled = ppe.runtime.compile(make_model().eval(), backend=RecordingBackend())
    with torch.no_grad():
        assert compiled(torch.randn(2, 4)).grad_fn is None
    forward_only = ppe.runtime.compile(
        make_model(), backend=RecordingBackend(), generate_backward=False
    )
    assert forward_only(torch.randn(2, 4)).grad_fn is None


class DataDependent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.sum() > 0:  # a branch on a tensor's value
            return y * 2
        return y - 1


@pytest.mark.parametrize("how", ["differentiable", "with_optimizer", "forward_only", "no_grad"])
def test_data_dependent_control_flow_raises_dynamo_unsupported(how: str) -> None:
    model = DataDependent()
    if how == "with_optimizer":
        compiled = ppe.runtime.compile(model, torch.optim.SGD(model.parameters(), lr=0.1))
    else:
        compiled = ppe.runtime.compile(
            model, backend="eager", generate_backward=how != "forward_only"
        )
    x = torch.randn(2, 3)
    with pytest.raises(torch._dynamo.exc.Unsupported, match="depends on tensor values"):
        if how == "no_grad":
            with torch.no_grad():
                compiled(x)
        else:
            compiled(x)
    assert all(param.grad is None for param in model.parameters())


# -- ppe.ops.register: the graphs hold ppe.<name>_fwd and ppe.<name>_bwd -----------------


def _register_scale_add() -> tuple[str, Any]:
    name = f"fidelity_scale_add_{next(_ids)}"
    op = ppe.ops.register(
        name,
        ppe.ops.OpDesc(
            lambda x, y, alpha: x * alpha + y,
            lambda x, y, alpha: torch.empty_like(x),
            "(Tensor x, Tensor y, float alpha) -> Tensor",
        ),
        ppe.ops.OpDesc(
            lambda g, x, y, alpha: (g * alpha, g),
            lambda g, x, y, alpha: (torch.empty_like(x), torch.empty_like(y)),
            "(Tensor g, Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)",
        ),
    )
    return name, op


class ScaleAdd(torch.nn.Module):
    def __init__(self, op: Any) -> None:
        super().__init__()
        self.op = op
        self.weight = torch.nn.Parameter(torch.arange(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(self.weight, x, 2.0).square()


def test_torch_compile_forward_graph_holds_the_fwd_node_and_backward_graph_the_bwd_node() -> None:
    name, op = _register_scale_add()
    forward_graphs: list[torch.fx.GraphModule] = []
    backward_graphs: list[torch.fx.GraphModule] = []

    def keep(graphs: list[torch.fx.GraphModule]) -> Any:
        def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            graphs.append(gm)
            return make_boxed_func(gm.forward)

        return compiler

    backend = aot_autograd(fw_compiler=keep(forward_graphs), bw_compiler=keep(backward_graphs))
    model = ScaleAdd(op)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(torch.ones(3)).sum().backward()

    (forward,) = forward_graphs
    assert f"ppe.{name}_fwd.default" in _targets(forward)
    assert f"ppe.{name}.default" not in _targets(forward)
    (backward,) = backward_graphs
    assert f"ppe.{name}_bwd.default" in _targets(backward)
    # d/dw sum((2w + 1)^2) = 4 (2w + 1)
    torch.testing.assert_close(model.weight.grad, 4 * (2 * torch.arange(3.0) + 1))


def test_ppe_compile_and_make_fx_graphs_hold_the_fwd_node() -> None:
    name, op = _register_scale_add()
    backend = RecordingBackend()
    model = ScaleAdd(op)
    ppe.runtime.compile(model, backend=backend)(torch.ones(3)).sum().backward()
    forward, backward = backend.graphs
    assert f"ppe.{name}_fwd.default" in _targets(forward)
    assert f"ppe.{name}_bwd.default" in _targets(backward)

    traced = make_fx(lambda a, b: op(a, b, 3.0))(torch.ones(2), torch.ones(2))
    assert _targets(traced) == {f"ppe.{name}_fwd.default"}
    torch.testing.assert_close(traced(torch.ones(2), torch.ones(2)), torch.full((2,), 4.0))


def test_a_registered_op_called_eagerly_is_still_differentiable() -> None:
    _, op = _register_scale_add()
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x, y, 1.5), x * 1.5 + y)
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, 1.5), (x, y))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["aot_eager", "callable"])
def test_compiled_forward_without_optimizer_backpropagates_on_cuda(backend: str) -> None:
    model, reference = make_model().cuda(), make_model().cuda()
    compiled = ppe.runtime.compile(
        model, backend=RecordingBackend() if backend == "callable" else backend
    )
    x = torch.randn(8, 4, device="cuda")
    out = compiled(x)
    expected = reference(x)
    assert out.device.type == "cuda" and out.grad_fn is not None
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)
