"""``checkpoint``: gradients as without checkpointing, normalization statistics updated once."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

import pytest
import torch
import torch.utils.checkpoint

import pytorch_pfn_extras.utils.checkpoint as checkpoint_module
from pytorch_pfn_extras.utils.checkpoint import checkpoint

_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def _assert_same(actual: torch.Tensor | None, expected: torch.Tensor | None) -> None:
    assert (actual is None) == (expected is None)
    if actual is not None and expected is not None:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def _assert_same_state(actual: torch.nn.Module, expected: torch.nn.Module) -> None:
    """Parameters, their gradients and buffers (running statistics) are bitwise equal."""
    for a, e in zip(actual.parameters(), expected.parameters()):
        _assert_same(a, e)
        _assert_same(a.grad, e.grad)
    actual_buffers = dict(actual.named_buffers())
    expected_buffers = dict(expected.named_buffers())
    assert actual_buffers.keys() == expected_buffers.keys()
    for name, buffer in actual_buffers.items():
        _assert_same(buffer, expected_buffers[name])


def _norm_layer(kind: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """A training-mode normalization layer with 4 channels and the input shape it takes."""
    layers: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
        "bn1d": (lambda: torch.nn.BatchNorm1d(4), (8, 4)),
        "bn1d-cumulative": (lambda: torch.nn.BatchNorm1d(4, momentum=None), (8, 4)),
        "bn1d-untracked": (lambda: torch.nn.BatchNorm1d(4, track_running_stats=False), (8, 4)),
        "bn2d": (lambda: torch.nn.BatchNorm2d(4, momentum=0.3), (2, 4, 3, 3)),
        "bn2d-cumulative": (lambda: torch.nn.BatchNorm2d(4, momentum=None), (2, 4, 3, 3)),
        "syncbn": (lambda: torch.nn.SyncBatchNorm(4), (8, 4)),
        "instancenorm": (
            lambda: torch.nn.InstanceNorm1d(4, affine=True, track_running_stats=True),
            (8, 4, 5),
        ),
    }
    factory, shape = layers[kind]
    return factory(), shape


def _block(kind: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    norm, shape = _norm_layer(kind)
    # A channel-mixing layer before and after the normalization, dropout after it.
    mixers = {2: torch.nn.Linear(4, 4), 3: torch.nn.Conv1d(4, 4, 1), 4: torch.nn.Conv2d(4, 4, 1)}
    mix = mixers[len(shape)]
    block = torch.nn.Sequential(
        mix, norm, torch.nn.ReLU(), torch.nn.Dropout(0.5), copy.deepcopy(mix)
    )
    return block, shape


def _run_both(
    model: torch.nn.Module,
    shape: tuple[int, ...],
    call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
    *,
    device: str = "cpu",
) -> None:
    """Run ``call`` on a copy of ``model`` with and without checkpointing; compare everything."""
    model = model.to(device)
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    x = torch.randn(shape, device=device)
    x_ref = x.clone().requires_grad_()
    x_ckpt = x.clone().requires_grad_()

    torch.manual_seed(2)
    y_ref = call(reference, x_ref)
    (y_ref * torch.arange(y_ref.numel(), device=device).view_as(y_ref)).sum().backward()

    torch.manual_seed(2)
    y_ckpt = checkpoint(lambda h: call(model, h), x_ckpt)
    (y_ckpt * torch.arange(y_ckpt.numel(), device=device).view_as(y_ckpt)).sum().backward()

    _assert_same(y_ckpt, y_ref)
    _assert_same(x_ckpt.grad, x_ref.grad)
    _assert_same_state(model, reference)


def _apply(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = module(x)
    return out


@pytest.mark.parametrize(
    "kind",
    [
        "bn1d",
        "bn1d-cumulative",
        "bn1d-untracked",
        "bn2d",
        "bn2d-cumulative",
        "syncbn",
        "instancenorm",
    ],
)
def test_gradients_and_running_stats_match_a_plain_forward(kind: str) -> None:
    block, shape = _block(kind)
    _run_both(block, shape, _apply)


def test_torch_checkpoint_alone_updates_running_stats_twice() -> None:
    # The behaviour ``checkpoint`` exists to fix; if torch changes it, the fix can go.
    bn = torch.nn.BatchNorm1d(4)
    x = torch.randn(8, 4, requires_grad=True)
    torch.utils.checkpoint.checkpoint(bn, x, use_reentrant=False).sum().backward()
    assert int(bn.num_batches_tracked) == 2


@pytest.mark.parametrize("kind", ["bn1d", "bn1d-cumulative"])
def test_module_as_function_updates_running_stats_once(kind: str) -> None:
    # The batch norm is the last op that saves tensors: torch stops the recomputation inside it,
    # before the module's forward hook could run.
    bn, shape = _norm_layer(kind)
    reference = copy.deepcopy(bn)
    x = torch.randn(shape, requires_grad=True)
    checkpoint(bn, x).sum().backward()
    reference(x).sum().backward()
    _assert_same_state(bn, reference)


def test_closure_over_modules_updates_running_stats_once() -> None:
    modules = torch.nn.ModuleDict(
        {
            "conv": torch.nn.Conv2d(3, 4, 3),
            "bn": torch.nn.BatchNorm2d(4),
            "head": torch.nn.Linear(4, 2),
        }
    )

    def forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(model["bn"](model["conv"](x)))
        out: torch.Tensor = model["head"](h.mean(dim=(2, 3)))
        return out

    _run_both(modules, (2, 3, 6, 6), forward)


def test_module_called_twice_is_updated_twice_as_without_checkpointing() -> None:
    model = torch.nn.ModuleDict(
        {"bn": torch.nn.BatchNorm1d(4, momentum=None), "lin": torch.nn.Linear(4, 4)}
    )

    def forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model["bn"](model["lin"](model["bn"](x)))
        return out

    _run_both(model, (8, 4), forward)
    assert int(model["bn"].num_batches_tracked) == 2


def test_statistics_read_after_the_update_match_the_forward() -> None:
    # The recomputation sees the statistics the forward saw after each normalization call.
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4, momentum=0.5))

    def forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = model(x)
        return h * (model[1].running_var + 1)

    _run_both(model, (8, 4), forward)


def test_eval_mode_batch_norm_keeps_its_statistics() -> None:
    block, shape = _block("bn1d")
    block[1].running_mean.fill_(0.5)
    block.eval()
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    _run_both(block, shape, _apply)
    for name, buffer in block.named_buffers():
        _assert_same(buffer, before[name])


def test_inputs_without_grad_give_parameter_gradients() -> None:
    block, shape = _block("bn1d")
    reference = copy.deepcopy(block)
    x = torch.randn(shape)
    torch.manual_seed(3)
    reference(x).sum().backward()
    torch.manual_seed(3)
    checkpoint(block, x).sum().backward()
    _assert_same_state(block, reference)


def test_several_positional_args_and_tuple_output() -> None:
    bn = torch.nn.BatchNorm1d(4)
    lin = torch.nn.Linear(4, 4)
    ref_bn, ref_lin = copy.deepcopy(bn), copy.deepcopy(lin)

    def forward(
        bn: torch.nn.Module, lin: torch.nn.Module, a: torch.Tensor, b: torch.Tensor, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = bn(a + b)
        return lin(h) * scale, h.sum(dim=1)

    a, b = torch.randn(8, 4, requires_grad=True), torch.randn(8, 4)
    first, second = checkpoint(lambda *xs: forward(bn, lin, *xs), a, b, 2.0)
    (first.sum() + second.pow(2).sum()).backward()
    grad_a = a.grad
    a.grad = None
    ref_first, ref_second = forward(ref_bn, ref_lin, a, b, 2.0)
    (ref_first.sum() + ref_second.pow(2).sum()).backward()

    _assert_same(first, ref_first)
    _assert_same(second, ref_second)
    _assert_same(grad_a, a.grad)
    _assert_same_state(bn, ref_bn)
    _assert_same_state(lin, ref_lin)


def test_nested_checkpoints_update_running_stats_once() -> None:
    outer, shape = _block("bn1d-cumulative")
    inner, _ = _block("bn1d")
    model = torch.nn.ModuleDict({"outer": outer, "inner": inner})

    def nested(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = checkpoint(model["inner"], x)
        out: torch.Tensor = model["outer"](h)
        return out

    plain = copy.deepcopy(model)

    def plain_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model["outer"](model["inner"](x))
        return out

    # checkpoint(nested) against the plain composition, on identical copies.
    torch.manual_seed(4)
    x = torch.randn(shape)
    x_ref, x_ckpt = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(5)
    plain_forward(plain, x_ref).sum().backward()
    torch.manual_seed(5)
    checkpoint(lambda h: nested(model, h), x_ckpt).sum().backward()
    _assert_same(x_ckpt.grad, x_ref.grad)
    _assert_same_state(model, plain)


def test_no_grad_simply_runs_the_function() -> None:
    bn = torch.nn.BatchNorm1d(4)
    reference = copy.deepcopy(bn)
    x = torch.randn(8, 4, requires_grad=True)
    with torch.no_grad():
        y = checkpoint(bn, x)
        y_ref = reference(x)
    assert y.grad_fn is None
    _assert_same(y, y_ref)
    _assert_same_state(bn, reference)


def test_backward_twice_with_retain_graph_updates_running_stats_once() -> None:
    block, shape = _block("bn1d-cumulative")
    reference = copy.deepcopy(block)
    x = torch.randn(shape)
    torch.manual_seed(6)
    y_ref = reference(x).sum()
    y_ref.backward(retain_graph=True)
    y_ref.backward()
    torch.manual_seed(6)
    y = checkpoint(block, x).sum()
    y.backward(retain_graph=True)
    y.backward()
    _assert_same_state(block, reference)


def test_without_preserving_rng_state_deterministic_functions_still_match() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh())
    reference = copy.deepcopy(model)
    x = torch.randn(8, 4)
    checkpoint(model, x, preserve_rng_state=False).sum().backward()
    reference(x).sum().backward()
    _assert_same_state(model, reference)


def test_failed_recomputation_still_updates_running_stats_once() -> None:
    bn = torch.nn.BatchNorm1d(4)
    reference = copy.deepcopy(bn)
    calls = 0

    def flaky(x: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        h: torch.Tensor = bn(x)
        if calls == 2:
            raise ValueError("recomputation failed")
        return h.exp()

    x = torch.randn(8, 4, requires_grad=True)
    y = checkpoint(flaky, x)
    with pytest.raises(ValueError, match="recomputation failed"):
        y.sum().backward()
    reference(x)
    _assert_same_state(bn, reference)
    # Nothing is left hooked: a later plain forward updates the statistics as usual.
    bn(x)
    reference(x)
    _assert_same_state(bn, reference)


def test_other_threads_keep_their_updates_during_recomputation() -> None:
    # A module that, on every call, runs another batch norm on a second thread: that one is
    # not recomputed by checkpoint, so both of its calls (forward, recomputation) must count.
    other = torch.nn.BatchNorm1d(4)

    class CallsOtherThread(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            thread = threading.Thread(target=other, args=(torch.randn(8, 4),))
            thread.start()
            thread.join()
            return x * 2

    bn = torch.nn.BatchNorm1d(4)
    model = torch.nn.Sequential(CallsOtherThread(), bn, torch.nn.Tanh())
    checkpoint(model, torch.randn(8, 4, requires_grad=True)).sum().backward()
    assert int(bn.num_batches_tracked) == 1
    assert int(other.num_batches_tracked) == 2


def test_an_unknown_keyword_reaches_the_function_which_names_it() -> None:
    bn = torch.nn.BatchNorm1d(4)
    x = torch.randn(8, 4, requires_grad=True)
    with pytest.raises(TypeError, match="colour"):
        checkpoint(bn, x, colour="red")


def test_non_callable_function_raises_type_error_naming_its_type() -> None:
    with pytest.raises(TypeError, match="needs a callable function, got int"):
        checkpoint(3, torch.randn(2))  # type: ignore[arg-type]


def test_public_module_exports_checkpoint() -> None:
    assert checkpoint_module.__all__ == ["checkpoint"]
    assert checkpoint_module.checkpoint is checkpoint


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bn1d", "bn1d-cumulative", "syncbn"])
def test_gradients_and_running_stats_match_a_plain_forward_on_cuda(kind: str) -> None:
    # CUDA backward runs on autograd's device thread, which then enters the recomputation.
    block, shape = _block(kind)
    _run_both(block, shape, _apply, device="cuda")


def test_keyword_arguments_reach_the_function_and_torch_options_are_taken() -> None:
    linear = torch.nn.Linear(3, 3)

    def scaled(x: torch.Tensor, *, scale: float) -> torch.Tensor:
        return linear(x) * scale

    x = torch.randn(2, 3, requires_grad=True)
    y = checkpoint(scaled, x, scale=3.0, preserve_rng_state=False, determinism_check="none")
    torch.testing.assert_close(y, linear(x) * 3.0)
    y.sum().backward()
    assert x.grad is not None
    with torch.no_grad():
        torch.testing.assert_close(checkpoint(scaled, x, scale=2.0), linear(x) * 2.0)
    with pytest.raises(ValueError, match=r"checkpoint\(use_reentrant=True\) is not supported"):
        checkpoint(scaled, x, scale=1.0, use_reentrant=True)
    with pytest.raises(ValueError, match="sets its own context_fn"):
        checkpoint(scaled, x, scale=1.0, context_fn=lambda: None)
