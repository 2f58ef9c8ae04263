"""Lazy modules written by users on ``nn.modules.lazy.LazyInitializationMixin``, as with PPE."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.nn import ExtendedSequential
from pytorch_pfn_extras.nn.modules.lazy import LazyInitializationMixin, UninitializedParameter

OPTIMIZER_WARNING = "uninitialized lazy parameter in Optimizer"


class LazyAffine(LazyInitializationMixin, torch.nn.Module):
    """Per-feature scale and shift; the number of features comes from the first input.

    The mixin creates ``scale`` and ``shift`` as uninitialized parameters and ``seen``
    as an empty buffer; the first forward replaces them.
    """

    lazy_parameter_names = ("scale", "shift")
    lazy_buffer_names = ("seen",)

    def __init__(self, init_scale: float = 1.0) -> None:
        super().__init__()
        self.init_scale = init_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.lazy_parmeters_determined:
            features = x.shape[-1]
            self.scale = torch.nn.Parameter(torch.full((features,), self.init_scale))
            self.shift = torch.nn.Parameter(torch.zeros(features))
            self.seen = torch.zeros(features)
        self.seen += x.detach().reshape(-1, x.shape[-1]).abs().sum(0)
        return x * self.scale + self.shift


class PPEStyleLazyLinear(LazyInitializationMixin, torch.nn.Linear):
    """A lazy ``Linear`` written the way PPE writes its own lazy layers."""

    lazy_parameter_names = ("weight",)

    def __init__(self, in_features: int | None, *args: Any, **kwargs: Any) -> None:
        super().__init__(in_features or 0, *args, **kwargs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, UninitializedParameter):
            self.in_features = input.shape[-1]
            self.weight = torch.nn.Parameter(
                self.weight.new_empty(self.out_features, self.in_features)
            )
            self.reset_parameters()
        return super().forward(input)

    def reset_parameters(self) -> None:
        # Defer initialization until the shape of all lazy parameters is determined.
        if self.lazy_parmeters_determined:
            super().reset_parameters()


class LazyGain(LazyInitializationMixin, torch.nn.Module):
    """Assigns its own placeholder and materializes it in place."""

    lazy_parameter_names = ("gain",)

    def __init__(self) -> None:
        super().__init__()
        self.gain = UninitializedParameter()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.gain, UninitializedParameter):
            self.gain.materialize(x.shape[-1:])
            torch.nn.init.constant_(self.gain, 2.0)
        return x * self.gain


def _round_trip(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # type: ignore[no-any-return]


def test_mixin_creates_placeholders_that_the_first_forward_replaces() -> None:
    module = LazyAffine(init_scale=3.0)
    assert isinstance(module.scale, UninitializedParameter)
    assert isinstance(module.shift, UninitializedParameter)
    assert module.seen.shape == (0,)
    assert not module.lazy_parmeters_determined
    assert module.lazy_parameter_names == ("scale", "shift")
    assert module.lazy_buffer_names == ("seen",)

    output = module(torch.ones(2, 4))

    assert module.lazy_parmeters_determined
    assert type(module.scale) is torch.nn.Parameter
    torch.testing.assert_close(output, torch.full((2, 4), 3.0))
    torch.testing.assert_close(module.seen, torch.full((4,), 2.0))
    assert [name for name, _ in module.named_parameters()] == ["scale", "shift"]


def test_user_lazy_module_trains_after_its_first_forward() -> None:
    module = LazyAffine()
    module(torch.zeros(1, 3))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)  # no warning: initialized
    loss = (module(torch.ones(2, 3)) - 2.0).pow(2).mean()
    loss.backward()
    optimizer.step()
    torch.testing.assert_close(module.scale.detach(), torch.full((3,), 1.0 + 0.5 * 2 / 3))


def test_optimizer_warns_about_a_user_modules_uninitialized_parameters() -> None:
    with pytest.warns(UserWarning, match=OPTIMIZER_WARNING):
        torch.optim.Adam(LazyAffine().parameters())


def test_ppe_style_layer_infers_its_size_and_draws_like_the_eager_layer() -> None:
    layer = PPEStyleLazyLinear(None, 3)
    assert isinstance(layer.weight, UninitializedParameter)
    assert not layer.lazy_parmeters_determined
    x = torch.randn(5, 4)
    torch.manual_seed(1)
    output = layer(x)
    torch.manual_seed(1)
    eager = torch.nn.Linear(4, 3)
    assert layer.in_features == 4
    torch.testing.assert_close(layer.weight, eager.weight)
    torch.testing.assert_close(output, eager(x))


def test_ppe_style_layer_with_an_explicit_size_is_the_eager_layer() -> None:
    torch.manual_seed(2)
    layer = PPEStyleLazyLinear(4, 3)
    torch.manual_seed(2)
    eager = torch.nn.Linear(4, 3)
    assert layer.lazy_parmeters_determined
    assert type(layer.weight) is torch.nn.Parameter
    torch.testing.assert_close(layer.state_dict(), eager.state_dict())


def test_materialize_determines_a_placeholder_in_place() -> None:
    module = LazyGain()
    placeholder = module.gain
    torch.testing.assert_close(module(torch.ones(3)), torch.full((3,), 2.0))
    assert module.gain is placeholder
    assert type(placeholder) is torch.nn.Parameter
    assert module.lazy_parmeters_determined


def test_materialize_takes_device_and_dtype() -> None:
    param = UninitializedParameter()
    param.materialize((2, 2), device="meta", dtype=torch.float64)
    assert (param.shape, param.device.type, param.dtype) == ((2, 2), "meta", torch.float64)
    assert type(param) is torch.nn.Parameter
    same_device = UninitializedParameter()
    same_device.materialize((3,), dtype=torch.float16)
    assert (same_device.shape, same_device.dtype) == ((3,), torch.float16)


@pytest.mark.parametrize("make", [LazyAffine, lambda: PPEStyleLazyLinear(None, 2), LazyGain])
def test_share_memory_of_an_undetermined_user_module_raises(make: Any) -> None:
    module = make()
    with pytest.raises(RuntimeError, match="cannot share the memory of an uninitialized"):
        module.share_memory()
    module(torch.ones(1, 3))
    module.share_memory()
    assert all(param.is_shared() for param in module.parameters())


def test_undetermined_parameters_are_left_out_of_the_state_dict() -> None:
    model = torch.nn.Sequential(LazyAffine(), PPEStyleLazyLinear(None, 2))
    state = model.state_dict()
    assert list(state) == ["0.seen", "1.bias"]
    model(torch.ones(1, 3))
    assert list(model.state_dict()) == ["0.scale", "0.shift", "0.seen", "1.weight", "1.bias"]


def test_undetermined_state_loads_into_an_undetermined_module() -> None:
    target = torch.nn.Sequential(LazyAffine(), PPEStyleLazyLinear(None, 2))
    target.load_state_dict(
        _round_trip(torch.nn.Sequential(LazyAffine(), PPEStyleLazyLinear(None, 2)).state_dict())
    )
    assert not target[0].lazy_parmeters_determined
    assert not target[1].lazy_parmeters_determined
    assert target(torch.ones(1, 3)).shape == (1, 2)


def test_determined_state_determines_an_undetermined_module() -> None:
    trained = torch.nn.Sequential(LazyAffine(init_scale=0.5), PPEStyleLazyLinear(None, 2))
    trained(torch.randn(4, 3))
    restored = torch.nn.Sequential(LazyAffine(), PPEStyleLazyLinear(None, 2))
    restored.load_state_dict(_round_trip(trained.state_dict()))

    assert restored[0].lazy_parmeters_determined
    assert restored[1].lazy_parmeters_determined
    torch.testing.assert_close(restored.state_dict(), trained.state_dict())
    x = torch.randn(2, 3)
    torch.testing.assert_close(restored(x), trained(x))


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (LazyAffine, "buffers"),  # its lazy buffer is checked first, as in PPE 0.9
        (lambda: PPEStyleLazyLinear(None, 2), "parameters"),
        (LazyGain, "parameters"),
    ],
    ids=["LazyAffine", "PPEStyleLazyLinear", "LazyGain"],
)
def test_undetermined_state_into_a_determined_module_raises(make: Any, what: str) -> None:
    state = _round_trip(make().state_dict())
    module = make()
    module(torch.ones(1, 5))
    before = {key: value.clone() for key, value in module.state_dict().items()}

    with pytest.raises(
        RuntimeError, match=f"^Can't load uninitialized {what} in already initialized modules"
    ):
        module.load_state_dict(state)

    assert module.lazy_parmeters_determined
    after = module.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, msg=key)


def test_undetermined_parameters_into_a_determined_module_raise_even_when_not_strict() -> None:
    class LazyScale(LazyInitializationMixin, torch.nn.Module):
        lazy_parameter_names = ("scale",)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if isinstance(self.scale, UninitializedParameter):
                self.scale.materialize(x.shape[-1:])
                torch.nn.init.ones_(self.scale)
            return x * self.scale

    state = _round_trip(LazyScale().state_dict())
    module = LazyScale()
    module(torch.ones(3))
    with pytest.raises(
        RuntimeError,
        match=r"^Can't load uninitialized parameters in already initialized modules: "
        r"LazyScale's 'scale' has shape \(3,\)",
    ):
        module.load_state_dict(state, strict=False)
    torch.testing.assert_close(module.scale.detach(), torch.ones(3))


def test_user_lazy_modules_copy_convert_and_repeat_while_undetermined() -> None:
    module = LazyAffine().double()
    assert isinstance(module.scale, UninitializedParameter)
    copied = copy.deepcopy(module)
    assert isinstance(copied.scale, UninitializedParameter)
    moved = LazyGain().to("meta")
    assert isinstance(moved.gain, UninitializedParameter)
    assert moved.gain.device.type == "meta"

    # Nothing to re-initialize before the first forward: no warning (warnings are errors).
    repeated = ExtendedSequential(LazyAffine(), PPEStyleLazyLinear(None, 3)).repeat(2)
    assert repeated(torch.ones(1, 4)).shape == (1, 3)
    assert repeated[1][0].scale.shape == (3,)


@pytest.mark.gpu
def test_a_cpu_placeholder_materializes_on_the_inputs_device() -> None:
    class OnInputDevice(LazyGain):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if isinstance(self.gain, UninitializedParameter):
                self.gain.materialize(x.shape[-1:], device=x.device)
                torch.nn.init.constant_(self.gain, 2.0)
            return x * self.gain

    module = OnInputDevice()  # built on the CPU, first input on the GPU
    placeholder = module.gain
    output = module(torch.ones(3, device="cuda"))
    assert module.gain is placeholder
    assert module.gain.device.type == "cuda"
    torch.testing.assert_close(output, torch.full((3,), 2.0, device="cuda"))
