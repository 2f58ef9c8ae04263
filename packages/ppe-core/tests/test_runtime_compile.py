"""ppe.compile: with an optimizer, one graph with forward and backward given to a backend,
training steps that match the eager loop; without, a differentiable compiled forward."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.runtime import compile as ppe_compile


class RecordingBackend:
    """A torch.compile-style backend that keeps the graphs it gets and runs them as they are."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs.append(gm)
        return gm.forward

    def targets(self, index: int = -1) -> set[str]:
        return {
            str(node.target)
            for node in self.graphs[index].graph.nodes
            if node.op == "call_function"
        }


def make_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
    )


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, dampening=0.1),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_each_call_is_the_eager_training_step(name: str) -> None:
    model, reference = make_model(), make_model()
    optimizer = OPTIMIZERS[name](model.parameters())
    reference_optimizer = OPTIMIZERS[name](reference.parameters())
    backend = RecordingBackend()
    step = ppe_compile(model, optimizer, backend=backend)
    for _ in range(4):
        x = torch.randn(16, 4)
        out = step(x)
        reference_optimizer.zero_grad()
        expected = reference(x)
        expected.sum().backward()
        reference_optimizer.step()
        torch.testing.assert_close(out, expected.detach())
        assert not out.requires_grad
    # parameters, BatchNorm statistics (updated in place by the graph) and gradients agree
    torch.testing.assert_close(model.state_dict(), reference.state_dict())
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)
    assert len(backend.graphs) == 1  # traced once for this input shape


def test_with_an_optimizer_the_backend_gets_one_graph_with_forward_and_backward_operators() -> None:
    backend = RecordingBackend()
    model = make_model()
    step = ppe_compile(model, torch.optim.SGD(model.parameters(), lr=0.1), backend=backend)
    step(torch.randn(8, 4))
    assert len(backend.graphs) == 1
    targets = backend.targets()
    assert {"aten.addmm.default", "aten.relu.default"} <= targets  # forward
    assert {"aten.threshold_backward.default", "aten.mm.default"} <= targets  # backward
    assert any(target.startswith("aten.native_batch_norm_backward") for target in targets)
    placeholders = [node for node in backend.graphs[0].graph.nodes if node.op == "placeholder"]
    n_state = len(list(step.parameters())) + len(list(step.buffers()))
    assert len(placeholders) == n_state + 1  # parameters, buffers, then the input


def test_without_optimizer_gradients_accumulate_as_with_backward() -> None:
    model, reference = make_model(), make_model()
    step = ppe_compile(model, backend=RecordingBackend())
    x = torch.randn(8, 4)
    for _ in range(2):
        step(x).sum().backward()  # as in PPE 0.9: the compiled forward is differentiable
        reference(x).sum().backward()
    for param, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad)


def test_inputs_that_require_grad_get_gradients_and_upstream_graphs_continue() -> None:
    upstream = torch.nn.Linear(3, 4)
    reference_upstream = copy.deepcopy(upstream)
    model, reference = make_model(), make_model()
    leaf = torch.randn(8, 3, requires_grad=True)
    reference_leaf = leaf.detach().clone().requires_grad_()
    step = ppe_compile(model, backend=RecordingBackend())
    # A non-leaf input: the backward pass goes on through `upstream`.
    step(upstream(leaf)).sum().backward()
    reference(reference_upstream(reference_leaf)).sum().backward()
    torch.testing.assert_close(upstream.weight.grad, reference_upstream.weight.grad)
    torch.testing.assert_close(leaf.grad, reference_leaf.grad)


def test_no_grad_runs_a_forward_only_graph_that_changes_nothing() -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    backend = RecordingBackend()
    step = ppe_compile(model, optimizer, backend=backend)
    step.eval()
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(8, 4)
    with torch.no_grad():
        out = step(x)
    torch.testing.assert_close(out, model(x))
    torch.testing.assert_close(model.state_dict(), before)
    assert all(param.grad is None for param in model.parameters())
    assert not any("backward" in target for target in backend.targets())


def test_generate_backward_false_compiles_the_forward_only() -> None:
    model = make_model().eval()
    backend = RecordingBackend()
    step = ppe_compile(model, backend=backend, generate_backward=False)
    x = torch.randn(8, 4)
    torch.testing.assert_close(step(x), model(x).detach())
    assert all(param.grad is None for param in model.parameters())
    assert not any("backward" in target for target in backend.targets())


def test_a_new_shape_or_mode_traces_again_and_the_same_reuses_the_graph() -> None:
    backend = RecordingBackend()
    step = ppe_compile(make_model(), backend=backend)
    step(torch.randn(8, 4))
    step(torch.randn(8, 4))
    assert len(backend.graphs) == 1
    step(torch.randn(5, 4))
    assert len(backend.graphs) == 2
    step.eval()
    step(torch.randn(5, 4))
    assert len(backend.graphs) == 3


class DictModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, *, t: torch.Tensor, power: int = 2) -> dict[str, Any]:
        y = self.linear(x)
        return {"loss": (y - t).pow(power).mean(), "y": y, "power": power}


def test_keyword_arguments_structured_outputs_and_non_tensor_values() -> None:
    model, reference = DictModel(), DictModel()
    reference.load_state_dict(model.state_dict())
    backend = RecordingBackend()
    step = ppe_compile(model, backend=backend)
    x, t = torch.randn(6, 3), torch.randn(6, 1)
    out = step(x, t=t, power=2)
    assert set(out) == {"loss", "y", "power"}
    assert out["power"] == 2
    expected = reference(x, t=t, power=2)
    (out["loss"] + out["y"].sum()).backward()  # every output is differentiable
    (expected["loss"] + expected["y"].sum()).backward()
    torch.testing.assert_close(out["loss"], expected["loss"])
    torch.testing.assert_close(model.linear.weight.grad, reference.linear.weight.grad)
    assert len(backend.graphs) == 2  # the forward, and the backward compiled by backward()
    step(x, t=t, power=4)  # another non-tensor argument: traced again
    assert len(backend.graphs) == 3


def test_decompositions_rewrite_the_graph() -> None:
    backend = RecordingBackend()
    decompositions = torch._decomp.get_decompositions([torch.ops.aten.addmm])
    step = ppe_compile(torch.nn.Linear(3, 2), backend=backend, decompositions=decompositions)
    x = torch.randn(4, 3)
    torch.testing.assert_close(
        step(x), torch.nn.functional.linear(x, step.module.weight, step.module.bias)
    )
    assert "aten.addmm.default" not in backend.targets()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_backends_can_be_named(backend: str) -> None:
    model, reference = make_model(), make_model()
    step = ppe_compile(model, torch.optim.SGD(model.parameters(), lr=0.1), backend=backend)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    step(x)
    reference(x).sum().backward()
    reference_optimizer.step()
    torch.testing.assert_close(model.state_dict(), reference.state_dict())


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor imports torch.jit APIs
def test_the_default_backend_is_inductor_and_trains_like_eager() -> None:
    model, reference = make_model(), make_model()
    step = ppe_compile(model, torch.optim.SGD(model.parameters(), lr=0.1))
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(8, 4)
        out = step(x)
        reference_optimizer.zero_grad()
        expected = reference(x)
        expected.sum().backward()
        reference_optimizer.step()
        torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(model.state_dict(), reference.state_dict())


@pytest.mark.gpu
def test_compiled_step_runs_on_cuda() -> None:
    model, reference = make_model().cuda(), make_model().cuda()
    step = ppe_compile(model, torch.optim.SGD(model.parameters(), lr=0.1), backend="aot_eager")
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.randn(8, 4, device="cuda")
    out = step(x)
    expected = reference(x)
    expected.sum().backward()
    reference_optimizer.step()
    assert out.device.type == "cuda"
    torch.testing.assert_close(model.state_dict(), reference.state_dict())


def test_the_compiled_module_shares_the_original_parameters() -> None:
    model = make_model()
    step = ppe_compile(model, backend=RecordingBackend())
    assert step.module is model
    assert list(step.parameters()) == list(model.parameters())
    assert set(step.state_dict()) == {f"module.{key}" for key in model.state_dict()}


def test_errors_name_what_was_given() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="generate_backward=True"):
        ppe_compile(model, torch.optim.SGD(model.parameters()), generate_backward=False)
    with pytest.raises(TypeError, match=r"expects a torch\.nn\.Module, got function"):
        ppe_compile(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a torch\.optim\.Optimizer, got list"):
        ppe_compile(model, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown compiler backend 'no-such-backend'"):
        ppe_compile(model, backend="no-such-backend")
    with pytest.raises(TypeError, match="backend must be a backend name"):
        ppe_compile(model, backend=3)  # type: ignore[arg-type]


def test_a_module_without_trainable_parameters_cannot_generate_a_training_step() -> None:
    model = torch.nn.Linear(2, 2).requires_grad_(False)
    other = torch.nn.Parameter(torch.zeros(1))
    step = ppe_compile(model, torch.optim.SGD([other], lr=0.1), backend=RecordingBackend())
    with pytest.raises(ValueError, match="no output of the module requires grad"):
        step(torch.randn(1, 2))
    with torch.no_grad():
        step(torch.randn(1, 2))  # the forward alone is fine
    # Without an optimizer the forward is compiled as it is: like eager, nothing to differentiate.
    out = ppe_compile(model, backend=RecordingBackend())(torch.randn(1, 2))
    assert not out.requires_grad


def test_switching_one_submodule_to_eval_traces_again() -> None:
    model, reference = make_model(), make_model()
    backend = RecordingBackend()
    step = ppe_compile(model, backend=backend)
    x = torch.randn(8, 4)
    step(x)
    reference(x)  # the same training-mode forward: the same running statistics
    model[1].eval()  # only the BatchNorm: it now uses its running statistics
    reference[1].eval()
    torch.testing.assert_close(step(x), reference(x).detach())
    assert len(backend.graphs) == 2
