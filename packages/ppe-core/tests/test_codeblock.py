"""CodeBlocks: update_parameters/forward executed by the runtime, against hand-written loops."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pytorch_pfn_extras.runtime import (
    BaseRuntime,
    CodeBlock,
    PyTorchRuntime,
    forward,
    to,
    update_parameters,
)

Batch = tuple[torch.Tensor, torch.Tensor]


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(x)
        return {"y": y, "loss": F.mse_loss(y, t)}


class LossOnly(Regressor):
    """Returns the loss tensor itself and takes the batch as one tuple."""

    def forward(self, batch: Batch) -> torch.Tensor:  # type: ignore[override]
        x, t = batch
        return F.mse_loss(self.net(x), t)


def make_batches(n: int = 4) -> list[Batch]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
        for _ in range(n)
    ]


def make_optimizer(kind: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=0.01)


def twin_models(cls: type[Regressor] = Regressor) -> tuple[Regressor, Regressor]:
    torch.manual_seed(0)
    model = cls()
    return model, copy.deepcopy(model)


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name


# ------------------------------------------------------ training equivalence


@pytest.mark.parametrize("optimizer_kind", ["sgd", "adam"])
@pytest.mark.parametrize(
    ("model_cls", "as_batch"),
    [
        (Regressor, lambda x, t: {"x": x, "t": t}),
        (Regressor, lambda x, t: (x, t)),
        (Regressor, lambda x, t: [x, t]),
        (LossOnly, lambda x, t: ((x, t),)),
    ],
    ids=["dict-kwargs", "tuple-args", "list-args", "tensor-output"],
)
def test_update_parameters_trains_exactly_like_a_hand_written_loop(
    optimizer_kind: str, model_cls: type[Regressor], as_batch: Callable[..., Any]
) -> None:
    model, reference = twin_models(model_cls)
    optimizer = make_optimizer(optimizer_kind, model)
    ref_optimizer = make_optimizer(optimizer_kind, reference)
    step = update_parameters(to(model, "cpu"), optimizer)
    for x, t in make_batches():
        outs = step(as_batch(x, t))
        ref_optimizer.zero_grad()
        batch = as_batch(x, t)
        ref_outs = reference(**batch) if isinstance(batch, dict) else reference(*batch)
        ref_loss = ref_outs if isinstance(ref_outs, torch.Tensor) else ref_outs["loss"]
        ref_loss.backward()
        ref_optimizer.step()
        loss = outs if isinstance(outs, torch.Tensor) else outs["loss"]
        assert torch.equal(loss, ref_loss)
    assert_same_parameters(model, reference)
    assert ref_optimizer.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()


def test_stale_gradients_do_not_leak_into_an_update() -> None:
    model, reference = twin_models()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    (x, t), (x2, t2) = make_batches(2)
    model(x2, t2)["loss"].backward()  # gradients left over from elsewhere
    update_parameters(to(model, "cpu"), optimizer)({"x": x, "t": t})
    reference(x, t)["loss"].backward()
    ref_optimizer.step()
    assert_same_parameters(model, reference)


def test_several_optimizers_all_step() -> None:
    model, reference = twin_models()
    first, second = model.net[0], model.net[2]
    optimizers = [
        torch.optim.SGD(first.parameters(), lr=0.1),
        torch.optim.Adam(second.parameters(), lr=0.01),
    ]
    ref_optimizers = [
        torch.optim.SGD(reference.net[0].parameters(), lr=0.1),
        torch.optim.Adam(reference.net[2].parameters(), lr=0.01),
    ]
    step = update_parameters(to(model, "cpu"), optimizers)
    assert step.optimizers == optimizers
    for x, t in make_batches(3):
        step({"x": x, "t": t})
        for opt in ref_optimizers:
            opt.zero_grad()
        reference(x, t)["loss"].backward()
        for opt in ref_optimizers:
            opt.step()
    assert_same_parameters(model, reference)


class TwoLosses(Regressor):
    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(x)
        return {"mse": F.mse_loss(y, t), "l1": F.l1_loss(y, t), "y": y}


@pytest.mark.parametrize("backprop_from", ["mse", ("mse", "l1"), ["l1", "mse"]])
def test_backprop_from_selects_the_outputs_to_backpropagate(backprop_from: Any) -> None:
    model, reference = twin_models(TwoLosses)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    step = update_parameters(to(model, "cpu"), optimizer, backprop_from=backprop_from)
    names = [backprop_from] if isinstance(backprop_from, str) else list(backprop_from)
    for x, t in make_batches(3):
        step({"x": x, "t": t})
        ref_optimizer.zero_grad()
        outs = reference(x, t)
        torch.autograd.backward(torch.stack([outs[name] for name in names]).sum())
        ref_optimizer.step()
    for pa, pb in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(pa, pb)


class Generator(torch.nn.Linear):
    pass


class Discriminator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, fake: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": self.linear(fake).square().mean()}


def test_backprop_to_stops_at_the_batch_entry_and_leaves_its_gradient_there() -> None:
    torch.manual_seed(0)
    gen, disc = Generator(2, 3), Discriminator()
    ref_gen, ref_disc = copy.deepcopy(gen), copy.deepcopy(disc)
    to(gen, "cpu")
    disc_optimizer = torch.optim.SGD(disc.parameters(), lr=0.1)
    z = torch.randn(5, 2)

    fake = gen(z)
    update_parameters(to(disc, "cpu"), disc_optimizer, backprop_to="fake")({"fake": fake})
    assert all(param.grad is None for param in gen.parameters())

    ref_fake = ref_gen(z)
    ref_loss = ref_disc(ref_fake)["loss"]
    fake_grad, *disc_grads = torch.autograd.grad(ref_loss, [ref_fake, *ref_disc.parameters()])
    assert fake.grad is not None
    torch.testing.assert_close(fake.grad, fake_grad)
    for param, ref_param, grad in zip(disc.parameters(), ref_disc.parameters(), disc_grads):
        torch.testing.assert_close(param, ref_param - 0.1 * grad)

    # The generator's part of the graph is intact: continue the backward by hand.
    fake.backward(fake.grad)
    ref_fake.backward(fake_grad)
    for param, ref_param in zip(gen.parameters(), ref_gen.parameters()):
        torch.testing.assert_close(param.grad, ref_param.grad)


def test_without_backprop_to_gradients_flow_into_upstream_models() -> None:
    gen, disc = to(Generator(2, 3), "cpu"), to(Discriminator(), "cpu")
    update_parameters(disc, torch.optim.SGD(disc.parameters(), lr=0.1))(
        {"fake": gen(torch.randn(4, 2))}
    )
    assert all(param.grad is not None for param in gen.parameters())


class Closure(Regressor):
    """A block whose function runs its own backward (optimizers, no backprop)."""

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        outs = super().forward(x, t)
        torch.autograd.backward(2 * outs["loss"])
        return outs


def test_a_block_without_backprop_still_steps_its_optimizers() -> None:
    model, reference = twin_models(Closure)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    to(model, "cpu")
    block = CodeBlock(model, [optimizer], False, None, None, {}, PyTorchRuntime("cpu", {}))
    for x, t in make_batches(2):
        block({"x": x, "t": t})
        ref_optimizer.zero_grad()
        reference(x, t)
        ref_optimizer.step()
    assert_same_parameters(model, reference)


# ------------------------------------------------------------------- AMP


def test_bfloat16_autocast_training_matches_a_hand_written_autocast_loop() -> None:
    model, reference = twin_models()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    step = update_parameters(to(model, "cpu", options={"autocast": True}), optimizer)
    for x, t in make_batches():
        outs = step({"x": x, "t": t})
        assert outs["y"].dtype == torch.bfloat16
        ref_optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref_outs = reference(x, t)
        ref_outs["loss"].backward()
        ref_optimizer.step()
        assert torch.equal(outs["loss"], ref_outs["loss"])
    assert_same_parameters(model, reference)


def test_grad_scaler_training_matches_a_hand_written_scaled_loop() -> None:
    model, reference = twin_models()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4, growth_interval=2)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4, growth_interval=2)
    options = {"autocast": {"dtype": torch.float16}, "grad_scaler": scaler}
    step = update_parameters(to(model, "cpu", options=options), optimizer)
    for x, t in make_batches(5):
        step({"x": x, "t": t})
        ref_optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            ref_loss = reference(x, t)["loss"]
        ref_scaler.scale(ref_loss).backward()
        ref_scaler.step(ref_optimizer)
        ref_scaler.update()
    assert scaler.get_scale() == ref_scaler.get_scale() == 2.0**6
    assert_same_parameters(model, reference)


def test_grad_scaler_skips_the_step_when_gradients_overflow() -> None:
    model, _ = twin_models()
    before = copy.deepcopy(model.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120)  # float32 gradients overflow
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = update_parameters(to(model, "cpu", options={"grad_scaler": scaler}), optimizer)
    ((x, t),) = make_batches(1)
    step({"x": x, "t": 1000 * t})
    torch.testing.assert_close(model.state_dict(), before)
    assert scaler.get_scale() == 2.0**119


# --------------------------------------------------------------- forward


def test_forward_runs_only_the_forward_pass() -> None:
    model = to(Regressor(), "cpu")
    before = copy.deepcopy(model.state_dict())
    ((x, t),) = make_batches(1)
    block = forward(model)
    assert (block.backprop, block.optimizers, block.func) == (False, [], model)
    outs = block({"x": x, "t": t})
    torch.testing.assert_close(outs["y"], model.net(x))
    assert all(param.grad is None for param in model.parameters())
    torch.testing.assert_close(model.state_dict(), before)


def test_the_block_moves_the_batch_to_the_module_device() -> None:
    model = to(torch.nn.Linear(4, 2), "meta")
    out = forward(model)(torch.randn(3, 4))
    assert out.device.type == "meta"
    assert out.shape == (3, 2)


def test_builders_compose_and_keep_the_runtime() -> None:
    model = to(TwoLosses(), "cpu")
    first = torch.optim.SGD(model.net[0].parameters(), lr=0.1)
    second = torch.optim.SGD(model.net[2].parameters(), lr=0.1)
    base = forward(model)
    step = update_parameters(base, first, backprop_from="mse", backprop_to="x")
    both = update_parameters(step, second)
    assert both.optimizers == [first, second]
    assert (both.backprop_from, both.backprop_to, both.backprop) == ("mse", "x", True)
    assert both.runtime is base.runtime
    only_forward = forward(both)
    assert (only_forward.optimizers, only_forward.backprop, only_forward.backprop_from) == (
        [],
        False,
        None,
    )
    assert update_parameters(model, first, backprop_from=["mse", "l1"]).backprop_from == (
        "mse",
        "l1",
    )


# ------------------------------------------------------- runtime dispatch


def test_calling_a_block_executes_it_with_the_runtime_of_its_module() -> None:
    class RecordingRuntime(PyTorchRuntime):
        executed: list[CodeBlock] = []

        def execute(self, code_block: CodeBlock, batch: Any) -> Any:
            RecordingRuntime.executed.append(code_block)
            return super().execute(code_block, batch)

    model = to(Regressor(), "cpu", runtime_class=RecordingRuntime)
    step = update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.1))
    ((x, t),) = make_batches(1)
    step({"x": x, "t": t})
    assert RecordingRuntime.executed == [step]


def test_a_runtime_without_execute_says_so_when_a_block_runs() -> None:
    class MoveOnly(BaseRuntime):
        def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

    model = to(Regressor(), "ppe-test-move-only", runtime_class=MoveOnly)
    with pytest.raises(NotImplementedError, match=r"MoveOnly does not implement execute\(\)"):
        forward(model)({})


def test_a_hand_built_code_block_can_run_any_function() -> None:
    block = CodeBlock(
        lambda x: {"double": 2 * x}, [], False, None, None, {}, PyTorchRuntime("cpu", {})
    )
    assert block(torch.ones(2))["double"].tolist() == [2.0, 2.0]


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "builder", [forward, lambda m: update_parameters(m, torch.optim.SGD(m.parameters(), lr=1))]
)
def test_builders_need_a_module_moved_with_ppe_to(
    builder: Callable[[torch.nn.Module], Any],
) -> None:
    with pytest.raises(
        ValueError, match=r"needs a module moved with ppe.to\(module, device\) first"
    ):
        builder(Regressor())


@pytest.mark.parametrize("block", [lambda x: x, "model", None])
def test_builders_reject_objects_that_are_neither_modules_nor_blocks(block: Any) -> None:
    with pytest.raises(TypeError, match=r"forward\(\) expects a torch.nn.Module or a CodeBlock"):
        forward(block)


@pytest.mark.parametrize(
    ("optimizers", "error", "match"),
    [
        ([], ValueError, "at least one optimizer"),
        ({"main": None}, TypeError, "an optimizer or a sequence of optimizers, got dict"),
        ([object()], TypeError, r"torch.optim.Optimizer instances, got \['object'\]"),
    ],
)
def test_update_parameters_validates_optimizers(
    optimizers: Any, error: type[Exception], match: str
) -> None:
    model = to(Regressor(), "cpu")
    with pytest.raises(error, match=match):
        update_parameters(model, optimizers)


@pytest.mark.parametrize(
    ("argument", "value"), [("backprop_from", 0), ("backprop_to", []), ("backprop_from", [1])]
)
def test_update_parameters_validates_key_arguments(argument: str, value: Any) -> None:
    model = to(Regressor(), "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=rf"{argument} must be a key"):
        update_parameters(model, optimizer, **{argument: value})


class Outputs(torch.nn.Module):
    """Returns whatever ``make`` builds from a differentiable scalar."""

    def __init__(self, make: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.make = make

    def forward(self, x: torch.Tensor) -> Any:
        return self.make(self.weight * x)


@pytest.mark.parametrize(
    ("make", "backprop_from", "match"),
    [
        (
            lambda v: {"a": v.sum(), "b": v.sum()},
            None,
            r"outputs \['a', 'b'\] have no 'loss' entry",
        ),
        (
            lambda v: (v.sum(), v.sum()),
            None,
            "cannot choose the output to backpropagate from in a tuple",
        ),
        (
            lambda v: {"loss": v.sum()},
            "total",
            r"output\(s\) \['total'\] that the block did not return",
        ),
        (lambda v: v.sum(), "loss", "needs the block to return a dict, got torch.Tensor"),
        (lambda v: {"loss": v}, None, r"output 'loss': expected a scalar, got shape \(3,\)"),
        (lambda v: {"loss": 1.0}, None, "output 'loss': expected a tensor, got float"),
        (lambda v: {"loss": v.detach().sum()}, None, "output 'loss': it does not require grad"),
    ],
)
def test_unusable_outputs_are_reported_by_name(
    make: Callable[[torch.Tensor], Any], backprop_from: str | None, match: str
) -> None:
    model = to(Outputs(make), "cpu")
    step = update_parameters(
        model, torch.optim.SGD(model.parameters(), lr=0.1), backprop_from=backprop_from
    )
    with pytest.raises(ValueError, match=match):
        step({"x": torch.ones(3)})


def test_a_single_element_tuple_output_is_backpropagated() -> None:
    model = to(Outputs(lambda v: (v.sum(),)), "cpu")
    update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.5))({"x": torch.ones(3)})
    assert model.weight.tolist() == [0.5, 0.5, 0.5]


def test_an_update_under_no_grad_says_why_it_cannot_backpropagate() -> None:
    model = to(Regressor(), "cpu")
    step = update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.1))
    ((x, t),) = make_batches(1)
    with torch.no_grad(), pytest.raises(ValueError, match=r"torch.no_grad\(\)"):
        step({"x": x, "t": t})


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (
            {"fake": torch.ones(2, 3, dtype=torch.int64)},
            "entry 'fake' must be a floating-point tensor, got torch.int64 tensor",
        ),
        ({"fake": [1.0]}, "entry 'fake' must be a floating-point tensor, got list"),
        ({"other": torch.ones(2, 3)}, r"batch has no entry 'fake'; batch keys: \['other'\]"),
        ((torch.ones(2, 3, requires_grad=True),), "needs a dict batch, got tuple"),
    ],
)
def test_backprop_to_needs_a_floating_point_batch_entry(batch: Any, match: str) -> None:
    class AnyInput(Discriminator):
        def forward(self, fake: Any = None, other: Any = None) -> dict[str, torch.Tensor]:
            return super().forward(other if fake is None else fake)

    model = to(AnyInput(), "cpu")
    step = update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.1), backprop_to="fake")
    with pytest.raises(ValueError, match=match):
        step(batch)


def test_backprop_to_gives_the_gradient_of_a_plain_input_tensor() -> None:
    model = to(Discriminator(), "cpu")
    fake = torch.randn(4, 3)  # does not require grad: an adversarial-example style input
    update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.0), backprop_to=["fake"])(
        {"fake": fake}
    )
    expected_input = fake.clone().requires_grad_()
    model(expected_input)["loss"].backward()
    assert fake.grad is not None
    torch.testing.assert_close(fake.grad, expected_input.grad)
    assert not fake.requires_grad


@pytest.mark.parametrize(
    "make_fake",
    [lambda: torch.randn(4, 3, requires_grad=True), lambda: Generator(2, 3)(torch.randn(4, 2))],
    ids=["leaf", "non-leaf"],
)
def test_backprop_to_accumulates_into_an_existing_gradient(
    make_fake: Callable[[], torch.Tensor],
) -> None:
    model = to(Discriminator(), "cpu")
    fake = make_fake()
    step = update_parameters(model, torch.optim.SGD(model.parameters(), lr=0.0), backprop_to="fake")
    step({"fake": fake})
    once = fake.grad.clone()  # type: ignore[union-attr]
    step({"fake": fake})
    torch.testing.assert_close(fake.grad, 2 * once)


# ------------------------------------------------------------------- CUDA


@pytest.mark.gpu
def test_cuda_float16_amp_training_matches_a_hand_written_loop() -> None:
    model, reference = twin_models()
    reference.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**8)
    ref_scaler = torch.amp.GradScaler("cuda", init_scale=2.0**8)
    options = {"autocast": True, "grad_scaler": scaler}
    step = update_parameters(to(model, "cuda:0", options=options), optimizer)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, t in make_batches():
        outs = step({"x": x, "t": t})  # CPU batch: moved by the runtime
        assert outs["y"].dtype == torch.float16
        assert outs["y"].device.type == "cuda"
        ref_optimizer.zero_grad()
        with torch.autocast("cuda"):
            ref_loss = reference(x.cuda(), t.cuda())["loss"]
        ref_scaler.scale(ref_loss).backward()
        ref_scaler.step(ref_optimizer)
        ref_scaler.update()
    assert scaler.get_scale() == ref_scaler.get_scale()
    for param, ref_param in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, ref_param)


def test_a_code_block_is_called_with_inputs_and_saves_its_runtime_state() -> None:
    model = Regressor()
    to(model, "cpu")
    block = forward(model)
    x, t = make_batches(1)[0]
    outs = block(inputs={"x": x, "t": t})  # PPE's parameter name
    torch.testing.assert_close(outs["loss"], F.mse_loss(model.net(x), t))
    block.state["compiled"] = "graph-1"  # what a runtime may keep in a block
    saved = block.state_dict()
    assert saved == {"compiled": "graph-1"}
    other = forward(model)
    other.load_state_dict(saved)
    assert other.state == {"compiled": "graph-1"}
    with pytest.raises(TypeError, match="expects a dict, got list"):
        other.load_state_dict([])  # type: ignore[arg-type]
