from __future__ import annotations

import copy
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pytorch_pfn_extras.nn import (
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyLinear,
    UninitializedParameter,
)

OPTIMIZER_WARNING = "uninitialized lazy parameter in Optimizer"
SCRIPT_DEPRECATION = "ignore:`torch.jit.script` is deprecated:DeprecationWarning"


@dataclass(frozen=True)
class Case:
    lazy: Callable[..., torch.nn.Module]
    eager: type[torch.nn.Module]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    input_shape: tuple[int, ...]
    size_attr: str
    size: int

    def __str__(self) -> str:
        return self.lazy.__name__ if hasattr(self.lazy, "__name__") else repr(self.lazy)

    def make_lazy(self) -> torch.nn.Module:
        return self.lazy(None, *self.args, **self.kwargs)

    def make_eager(self) -> torch.nn.Module:
        return self.eager(self.size, *self.args, **self.kwargs)

    def input(self, seed: int = 0) -> torch.Tensor:
        return torch.randn(self.input_shape, generator=torch.Generator().manual_seed(seed))


CASES = [
    Case(LazyLinear, torch.nn.Linear, (4,), {}, (5, 3), "in_features", 3),
    Case(LazyLinear, torch.nn.Linear, (4,), {"bias": False}, (2, 5, 6), "in_features", 6),
    Case(LazyConv1d, torch.nn.Conv1d, (4, 3), {}, (2, 6, 9), "in_channels", 6),
    Case(
        LazyConv2d,
        torch.nn.Conv2d,
        (4, 3),
        {"groups": 2, "padding": 1},
        (2, 6, 5, 5),
        "in_channels",
        6,
    ),
    Case(LazyConv2d, torch.nn.Conv2d, (2, 3), {}, (3, 5, 5), "in_channels", 3),
    Case(LazyConv3d, torch.nn.Conv3d, (2, 2), {"bias": False}, (1, 3, 4, 4, 4), "in_channels", 3),
    Case(LazyBatchNorm1d, torch.nn.BatchNorm1d, (), {}, (4, 5), "num_features", 5),
    Case(
        LazyBatchNorm1d, torch.nn.BatchNorm1d, (), {"affine": False}, (4, 5, 3), "num_features", 5
    ),
    Case(
        LazyBatchNorm2d,
        torch.nn.BatchNorm2d,
        (),
        {"momentum": 0.5},
        (4, 3, 2, 2),
        "num_features",
        3,
    ),
    Case(LazyBatchNorm3d, torch.nn.BatchNorm3d, (), {}, (2, 2, 2, 2, 2), "num_features", 2),
]
CASE_IDS = [f"{case}-{i}" for i, case in enumerate(CASES)]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def _assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        torch.testing.assert_close(state_a[key], state_b[key], msg=key)


def test_size_is_inferred_on_first_forward(case: Case) -> None:
    module = case.make_lazy()
    assert isinstance(module, case.eager)
    assert getattr(module, case.size_attr) is None
    assert not module.lazy_parmeters_determined

    output = module(case.input())

    assert getattr(module, case.size_attr) == case.size
    assert module.lazy_parmeters_determined
    eager = case.make_eager()
    for name, param in eager.named_parameters():
        assert module.get_parameter(name).shape == param.shape
        assert type(module.get_parameter(name)) is torch.nn.Parameter
    for name, buffer in eager.named_buffers():
        assert module.get_buffer(name).shape == buffer.shape
    assert repr(module) == repr(eager).replace(type(eager).__name__, type(module).__name__, 1)

    eager.load_state_dict(module.state_dict())
    torch.testing.assert_close(output, eager(case.input()))


def test_first_forward_draws_the_same_initial_values_as_the_eager_module(case: Case) -> None:
    torch.manual_seed(7)
    lazy = case.make_lazy().eval()  # eval: batch norm keeps its initial running stats
    lazy(case.input())
    torch.manual_seed(7)
    eager = case.make_eager()
    _assert_same_state(lazy, eager)


def test_parameters_are_materialized_in_place(case: Case) -> None:
    module = case.make_lazy()
    before = dict(module.named_parameters())
    module(case.input())
    after = dict(module.named_parameters())
    assert before.keys() == after.keys()
    assert all(before[name] is after[name] for name in before)


def test_explicit_size_makes_an_ordinary_module(case: Case) -> None:
    torch.manual_seed(3)
    module = case.lazy(case.size, *case.args, **case.kwargs)
    torch.manual_seed(3)
    eager = case.make_eager()
    assert module.lazy_parmeters_determined
    assert not any(isinstance(p, UninitializedParameter) for p in module.parameters())
    _assert_same_state(module, eager)
    torch.testing.assert_close(module(case.input()), eager(case.input()))


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adam])
def test_optimizer_warns_about_uninitialized_parameters(
    optimizer: type[torch.optim.Optimizer],
) -> None:
    model = torch.nn.Sequential(LazyLinear(None, 3), torch.nn.ReLU(), LazyLinear(None, 1))
    with pytest.warns(UserWarning, match=OPTIMIZER_WARNING) as record:
        optimizer(model.parameters(), lr=0.1)
    assert record[0].filename == __file__  # points at the user's line

    model(torch.zeros(2, 4))
    optimizer(model.parameters(), lr=0.1)  # no warning once initialized (warnings are errors)


def test_parameters_handed_to_an_optimizer_before_forward_are_still_trained() -> None:
    layer = LazyLinear(None, 1)
    with pytest.warns(UserWarning, match=OPTIMIZER_WARNING):
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(torch.ones(1, 2)).sum().backward()
    before = layer.weight.detach().clone()
    optimizer.step()
    torch.testing.assert_close(layer.weight.detach(), before - 0.5)


def test_other_readers_of_is_leaf_do_not_warn() -> None:
    layer = LazyLinear(None, 2)
    assert layer.weight.is_leaf


def test_model_of_lazy_modules_trains_like_its_eager_equivalent() -> None:
    class Net(torch.nn.Module):
        """The model of the user guide, with a batch norm; lazy or with explicit sizes."""

        def __init__(self, lazy: bool) -> None:
            super().__init__()
            nn = torch.nn
            self.conv1 = LazyConv2d(None, 4, 3) if lazy else nn.Conv2d(1, 4, 3)
            self.bn = LazyBatchNorm2d(None) if lazy else nn.BatchNorm2d(4)
            self.conv2 = LazyConv2d(None, 6, 3) if lazy else nn.Conv2d(4, 6, 3)
            self.fc1 = LazyLinear(None, 10) if lazy else nn.Linear(6 * 2 * 2, 10)
            self.fc2 = LazyLinear(None, 3) if lazy else nn.Linear(10, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.relu(self.bn(self.conv1(x)))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.relu(self.fc1(x.flatten(start_dim=1)))
            return F.log_softmax(self.fc2(x), dim=1)

    generator = torch.Generator().manual_seed(0)
    data = torch.randn(8, 1, 8, 8, generator=generator)
    target = torch.randint(0, 3, (8,), generator=generator)

    lazy, eager = Net(lazy=True), Net(lazy=False)
    lazy(data[:1])  # dummy forward initializes the lazy parameters
    eager.load_state_dict(lazy.state_dict())

    def train(model: torch.nn.Module) -> list[float]:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for _ in range(4):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    assert train(lazy) == pytest.approx(train(eager))
    _assert_same_state(lazy, eager)


def test_state_dict_of_an_uninitialized_module_round_trips(case: Case) -> None:
    source = case.make_lazy()
    state = source.state_dict()
    assert all(type(value) is torch.Tensor for value in state.values())
    # Undetermined lazy parameters are left out, as in PPE; the rest is kept.
    expected = {
        key
        for key, value in case.make_eager().state_dict().items()
        if key not in source.lazy_parameter_names
    }
    assert set(state) == expected

    target = case.make_lazy()
    target.load_state_dict(state)
    assert not target.lazy_parmeters_determined
    target(case.input())
    assert getattr(target, case.size_attr) == case.size


def test_loading_an_initialized_state_dict_initializes_the_module(case: Case) -> None:
    source = case.make_lazy()
    source(case.input())
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)

    target = case.make_lazy()
    target.load_state_dict(torch.load(buffer, weights_only=True))

    assert target.lazy_parmeters_determined
    assert getattr(target, case.size_attr) == case.size
    _assert_same_state(source, target)
    source.eval()
    target.eval()
    torch.testing.assert_close(target(case.input(seed=1)), source(case.input(seed=1)))


def test_loading_an_uninitialized_state_dict_into_an_initialized_module_raises(
    case: Case,
) -> None:
    buffer = io.BytesIO()
    torch.save(case.make_lazy().state_dict(), buffer)  # saved before any forward
    buffer.seek(0)
    module = case.make_lazy()
    module(case.input())
    before = {key: value.clone() for key, value in module.state_dict().items()}

    # As in PPE 0.9, the lazy buffers (batch norm's running stats) are checked first.
    what = "buffers" if module.lazy_buffer_names else "parameters"
    with pytest.raises(
        RuntimeError, match=f"^Can't load uninitialized {what} in already initialized modules"
    ):
        module.load_state_dict(torch.load(buffer, weights_only=True))

    # The trained weights are kept, not turned back into uninitialized ones.
    assert module.lazy_parmeters_determined
    assert getattr(module, case.size_attr) == case.size
    assert not any(isinstance(p, UninitializedParameter) for p in module.parameters())
    after = module.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, msg=key)


def test_loading_an_uninitialized_state_dict_into_a_trained_model_names_the_parameter() -> None:
    model = torch.nn.Sequential(torch.nn.Flatten(), LazyLinear(None, 2))
    state = model.state_dict()
    model(torch.ones(1, 3))
    with pytest.raises(RuntimeError, match=r"LazyLinear's '1\.weight' has shape \(2, 3\)"):
        model.load_state_dict(state)
    assert model[1].weight.shape == (2, 3)


def test_a_state_dict_missing_lazy_parameters_for_another_reason_is_refused() -> None:
    layer = LazyLinear(None, 2)
    layer(torch.zeros(1, 3))
    state = {"bias": torch.zeros(2)}  # no record that it was saved undetermined
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "weight"'):
        layer.load_state_dict(state)
    assert layer.lazy_parmeters_determined


def test_a_partial_non_strict_load_keeps_an_initialized_module() -> None:
    layer = LazyLinear(None, 2)
    layer(torch.zeros(1, 3))
    layer.load_state_dict({"bias": torch.tensor([1.0, 2.0])}, strict=False)
    assert layer.lazy_parmeters_determined
    assert layer.weight.shape == (2, 3)
    torch.testing.assert_close(layer.bias, torch.tensor([1.0, 2.0]))


def test_explicit_zero_size_is_inferred_as_in_ppe() -> None:
    layer = LazyLinear(0, 2)
    assert not layer.lazy_parmeters_determined
    assert layer(torch.zeros(1, 3)).shape == (1, 2)
    assert layer.in_features == 3


@pytest.mark.parametrize(
    ("make", "input_shape"),
    [
        (lambda: LazyLinear(None, 2), (1, 3)),
        (lambda: LazyConv2d(None, 2, 1), (1, 3, 2, 2)),
        (lambda: LazyBatchNorm1d(None), (2, 3)),
    ],
)
def test_share_memory_needs_determined_parameters(
    make: Callable[[], torch.nn.Module], input_shape: tuple[int, ...]
) -> None:
    module = make()
    with pytest.raises(RuntimeError, match="uninitialized lazy parameter: run a forward pass"):
        module.share_memory()
    module(torch.randn(input_shape))
    module.share_memory()
    assert all(param.is_shared() for param in module.parameters())


@pytest.mark.parametrize(
    ("module", "shape", "match"),
    [
        (lambda: LazyLinear(None, 2), (), "at least 1 dimension"),
        (lambda: LazyConv2d(None, 2, 1), (2, 3), r"3D \(unbatched\) or 4D \(batched\).*\(2, 3\)"),
        (lambda: LazyConv1d(None, 2, 1), (1, 2, 3, 4), r"2D \(unbatched\) or 3D \(batched\)"),
        (lambda: LazyConv2d(None, 4, 1, groups=2), (1, 3, 4, 4), "in_channels=3.*groups=2"),
        (lambda: LazyBatchNorm2d(None), (2, 3), "expected 4D input"),
    ],
)
def test_inputs_that_cannot_give_the_size_are_rejected(
    module: Callable[[], torch.nn.Module], shape: tuple[int, ...], match: str
) -> None:
    layer = module()
    with pytest.raises(ValueError, match=match):
        layer(torch.zeros(shape))
    assert not layer.lazy_parmeters_determined


def test_first_forward_accepts_the_input_as_keyword() -> None:
    layer = LazyLinear(None, 2)
    assert layer(input=torch.zeros(3, 5)).shape == (3, 2)
    assert layer.in_features == 5


def test_first_forward_rejects_a_non_tensor_input() -> None:
    layer = LazyLinear(None, 2)
    with pytest.raises(TypeError, match=r"torch.Tensor input, got list"):
        layer([1.0, 2.0])


def test_batch_norm_without_affine_or_running_stats_has_nothing_lazy() -> None:
    norm = LazyBatchNorm1d(None, affine=False, track_running_stats=False)
    assert norm.state_dict() == {}
    output = norm(torch.randn(6, 3))
    assert norm.num_features == 3
    torch.testing.assert_close(output.mean(0), torch.zeros(3), atol=1e-6, rtol=0)


@pytest.mark.parametrize("duplicate", ["deepcopy", "pickle"])
def test_copies_of_an_uninitialized_module_initialize_independently(duplicate: str) -> None:
    original = LazyLinear(None, 2)
    if duplicate == "deepcopy":
        copied = copy.deepcopy(original)
    else:
        buffer = io.BytesIO()
        torch.save(original, buffer)
        buffer.seek(0)
        copied = torch.load(buffer, weights_only=False)
    assert isinstance(copied.weight, UninitializedParameter)

    copied(torch.zeros(1, 6))
    original(torch.zeros(1, 3))
    assert (copied.in_features, original.in_features) == (6, 3)
    assert copied.weight.shape == (2, 6)
    assert original.weight.shape == (2, 3)


def test_dtype_conversion_before_initialization_is_kept() -> None:
    layer = LazyLinear(None, 2).double()
    assert isinstance(layer.weight, UninitializedParameter)
    layer(torch.zeros(1, 3, dtype=torch.float64))
    assert layer.weight.dtype == torch.float64
    assert layer.bias is not None
    assert layer.bias.dtype == torch.float64


def test_moving_to_another_device_keeps_parameters_uninitialized() -> None:
    layer = LazyLinear(None, 2).to("meta")
    assert isinstance(layer.weight, UninitializedParameter)
    assert layer.weight.device.type == "meta"
    with pytest.warns(UserWarning, match=OPTIMIZER_WARNING):
        torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.zeros(1, 3, device="meta"))
    assert layer.weight.shape == (2, 3)
    assert layer.weight.device.type == "meta"


def test_uninitialized_parameter_repr_names_the_placeholder() -> None:
    assert repr(LazyLinear(None, 4).weight) == "UninitializedParameter(placeholder shape=(4, 0))"


@pytest.mark.filterwarnings(SCRIPT_DEPRECATION)
def test_initialized_lazy_modules_can_be_scripted(case: Case) -> None:
    module = case.make_lazy()
    module(case.input())
    module.eval()
    scripted = torch.jit.script(module)
    torch.testing.assert_close(scripted(case.input(seed=2)), module(case.input(seed=2)))


def test_size_is_fixed_after_initialization() -> None:
    layer = LazyLinear(None, 2)
    layer(torch.zeros(1, 3))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        layer(torch.zeros(1, 5))
    assert layer.in_features == 3


@pytest.mark.gpu
def test_uninitialized_module_moved_to_cuda_initializes_there() -> None:
    layer = LazyConv2d(None, 2, 1).cuda()
    assert isinstance(layer.weight, UninitializedParameter)
    with pytest.warns(UserWarning, match=OPTIMIZER_WARNING):
        torch.optim.SGD(layer.parameters(), lr=0.1)
    output = layer(torch.zeros(1, 3, 4, 4, device="cuda"))
    assert output.device.type == "cuda"
    assert layer.weight.shape == (2, 3, 1, 1)
    assert layer.weight.device.type == "cuda"
