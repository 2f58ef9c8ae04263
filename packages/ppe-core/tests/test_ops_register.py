"""ppe.ops.register: differentiable custom operators that meta tensors and compilers trace."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.ops import OpDesc, register
from pytorch_pfn_extras.runtime import compile as ppe_compile

_ids = itertools.count()


def unique(name: str) -> str:
    """Operators live for the whole process: every test registers fresh names."""
    return f"{name}_{next(_ids)}"


def scale_add(name: str) -> Any:
    """x * alpha + y, with a float argument that gets no gradient."""
    return register(
        name,
        OpDesc(
            lambda x, y, alpha: x * alpha + y,
            lambda x, y, alpha: torch.empty_like(x),
            "(Tensor x, Tensor y, float alpha) -> Tensor",
        ),
        OpDesc(
            lambda g, x, y, alpha: (g * alpha, g),
            lambda g, x, y, alpha: (torch.empty_like(x), torch.empty_like(y)),
            "(Tensor g, Tensor x, Tensor y, float alpha) -> (Tensor, Tensor)",
        ),
    )


def test_the_operator_computes_and_passes_gradcheck() -> None:
    op = scale_add(unique("scale_add"))
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x, y, 3.0), x * 3.0 + y)
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, 2.5), (x, y))


def test_the_three_operators_live_in_the_ppe_namespace() -> None:
    name = unique("scale_add")
    op = scale_add(name)
    assert op is getattr(torch.ops.ppe, name)
    x, y = torch.ones(2), torch.full((2,), 2.0)
    torch.testing.assert_close(getattr(torch.ops.ppe, f"{name}_fwd")(x, y, 2.0), x * 2 + y)
    gx, gy = getattr(torch.ops.ppe, f"{name}_bwd")(torch.ones(2), x, y, 4.0)
    torch.testing.assert_close(gx, torch.full((2,), 4.0))
    torch.testing.assert_close(gy, torch.ones(2))


def test_meta_tensors_use_the_shape_function() -> None:
    calls: list[str] = []

    def op(x: torch.Tensor) -> torch.Tensor:
        calls.append("op")
        return x.sum(0)

    def meta(x: torch.Tensor) -> torch.Tensor:
        calls.append("meta")
        return x.new_empty(x.shape[1:])

    square_sum = register(
        unique("colsum"),
        OpDesc(op, meta, "(Tensor x) -> Tensor"),
        OpDesc(
            lambda g, x: g.expand_as(x),
            lambda g, x: torch.empty_like(x),
            "(Tensor g, Tensor x) -> Tensor",
        ),
    )
    out = square_sum(torch.empty(7, 3, device="meta"))
    assert out.device.type == "meta"
    assert out.shape == (3,)
    assert calls == ["meta"]


def test_multiple_outputs_get_one_gradient_each_zeros_for_unused_ones() -> None:
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def bwd(g_sin: torch.Tensor, g_cos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        seen.append((g_sin, g_cos))
        return g_sin * x.cos() - g_cos * x.sin()

    sincos = register(
        unique("sincos"),
        OpDesc(
            lambda x: (x.sin(), x.cos()),
            lambda x: (torch.empty_like(x), torch.empty_like(x)),
            "(Tensor x) -> (Tensor, Tensor)",
        ),
        OpDesc(
            bwd, lambda g1, g2, x: torch.empty_like(x), "(Tensor g1, Tensor g2, Tensor x) -> Tensor"
        ),
    )
    x = torch.randn(4, requires_grad=True)
    sin, _ = sincos(x)
    sin.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())
    torch.testing.assert_close(seen[0][1], torch.zeros(4))  # cos was not used


def test_a_backward_with_the_wrong_number_of_gradients_is_reported() -> None:
    op = register(
        unique("bad_grads"),
        OpDesc(
            lambda x, y: x + y, lambda x, y: torch.empty_like(x), "(Tensor x, Tensor y) -> Tensor"
        ),
        OpDesc(
            lambda g, x, y: g,
            lambda g, x, y: torch.empty_like(x),
            "(Tensor g, Tensor x, Tensor y) -> Tensor",
        ),
    )
    x = torch.randn(2, requires_grad=True)
    with pytest.raises(
        RuntimeError, match=r"returned 1 gradient\(s\), but ppe::bad_grads_\d+ has 2"
    ):
        op(x, x).sum().backward()


def test_compilers_keep_the_operator_as_one_fwd_node_and_one_bwd_node() -> None:
    name = unique("scale_add")
    op = scale_add(name)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return op(self.weight, x, 2.0).square().sum()

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(gm)
        return gm.forward

    model = Model()
    expected_grad = 2 * (2 * model.weight.detach() + 1) * 2  # d/dw sum((2w + x)^2), x = 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # one graph: forward and backward
    step = ppe_compile(model, optimizer, backend=backend)
    step(torch.ones(3))
    torch.testing.assert_close(model.weight.grad, expected_grad)
    targets = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert {f"ppe.{name}_fwd.default", f"ppe.{name}_bwd.default"} <= targets
    assert f"ppe.{name}.default" not in targets  # as in PPE 0.9: it is traced as its _fwd

    compiled = torch.compile(lambda a, b: op(a, b, 3.0), backend="aot_eager", fullgraph=True)
    a = torch.randn(3, requires_grad=True)
    compiled(a, torch.ones(3)).sum().backward()
    torch.testing.assert_close(a.grad, torch.full((3,), 3.0))


def test_registering_a_name_twice_is_an_error() -> None:
    name = unique("twice")
    scale_add(name)
    with pytest.raises(
        ValueError,
        match=rf"\['ppe::{name}', 'ppe::{name}_fwd', 'ppe::{name}_bwd'\] are already registered",
    ):
        scale_add(name)


@pytest.mark.parametrize(
    ("signature", "match"),
    [
        ("(Tensr x) -> Tensor", "is not an operator schema"),
        ("(Tensor(a!) x) -> Tensor", "mutates or aliases an argument"),
    ],
)
def test_invalid_signatures_are_rejected_before_anything_is_defined(
    signature: str, match: str
) -> None:
    name = unique("invalid")
    good = OpDesc(
        lambda g, x: g, lambda g, x: torch.empty_like(x), "(Tensor g, Tensor x) -> Tensor"
    )
    with pytest.raises(ValueError, match=match):
        register(name, OpDesc(lambda x: x, lambda x: x, signature), good)
    assert not hasattr(torch.ops.ppe, name)


def test_arguments_of_the_wrong_type_are_rejected() -> None:
    with pytest.raises(ValueError, match="must be a Python identifier, got 'not valid'"):
        register("not valid", None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"fwd_op must be a ppe\.ops\.OpDesc, got tuple"):
        register(unique("t"), (1, 2, 3), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"bwd_op\.op and bwd_op\.meta must be callables"):
        register(
            unique("t"),
            OpDesc(lambda x: x, lambda x: x, "(Tensor x) -> Tensor"),
            OpDesc(None, None, "(Tensor g, Tensor x) -> Tensor"),  # type: ignore[arg-type]
        )


def test_op_desc_has_ppe_fields() -> None:
    desc = OpDesc(op=abs, meta=abs, signature="(Tensor x) -> Tensor")
    assert (desc.op, desc.meta, desc.signature) == (abs, abs, "(Tensor x) -> Tensor")
