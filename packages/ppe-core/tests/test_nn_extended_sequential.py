from __future__ import annotations

from typing import Any

import pytest
import torch

from pytorch_pfn_extras.nn import ExtendedSequential, LazyLinear


def _block() -> ExtendedSequential:
    torch.manual_seed(0)
    return ExtendedSequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU())


def _weights(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("mode", ["init", "copy", "share"])
def test_repeat_nests_the_sequential_n_times(mode: Any) -> None:
    block = _block()
    repeated = block.repeat(3, mode=mode)
    assert isinstance(repeated, ExtendedSequential)
    assert isinstance(repeated, torch.nn.Sequential)
    assert len(repeated) == 3
    assert all(isinstance(child, ExtendedSequential) for child in repeated)
    assert "2.0.weight" in repeated.state_dict()
    x = torch.randn(4, 3)
    expected = x
    for child in repeated:
        expected = child(expected)
    torch.testing.assert_close(repeated(x), expected)


def test_init_mode_reinitializes_every_repetition() -> None:
    block = _block()
    original = _weights(block)
    repeated = block.repeat(2, mode="init")

    first, second = (repeated[i][0].weight for i in range(2))
    assert not torch.equal(first, second)
    assert not torch.equal(first, original[0])
    torch.testing.assert_close(_weights(block), original)  # the source is untouched
    assert first.data_ptr() != block[0].weight.data_ptr()


def test_init_mode_resets_buffers_through_reset_parameters() -> None:
    block = _block()
    block.train()
    block(torch.randn(8, 3) * 5 + 2)  # moves the batch norm's running stats
    repeated = block.repeat(1, mode="init")
    norm = repeated[0][1]
    torch.testing.assert_close(norm.running_mean, torch.zeros(3))
    torch.testing.assert_close(norm.running_var, torch.ones(3))


def test_copy_mode_copies_values_without_sharing_them() -> None:
    block = _block()
    repeated = block.repeat(2, mode="copy")
    for child in repeated:
        for copied, source in zip(child.parameters(), block.parameters()):
            assert copied is not source
            torch.testing.assert_close(copied, source)
    with torch.no_grad():
        repeated[0][0].weight.add_(1.0)
    torch.testing.assert_close(repeated[1][0].weight, block[0].weight)


def test_share_mode_shares_parameters_but_not_the_block() -> None:
    block = _block()
    repeated = block.repeat(3, mode="share")
    assert all(child is not block for child in repeated)
    assert all(isinstance(child, ExtendedSequential) for child in repeated)
    assert all(child[i] is block[i] for child in repeated for i in range(3))
    assert {id(p) for p in repeated.parameters()} == {id(p) for p in block.parameters()}

    # One optimizer step on the repeated model updates the block's own parameters.
    before = block[0].weight.detach().clone()
    repeated(torch.randn(4, 3)).sum().backward()
    torch.optim.SGD(repeated.parameters(), lr=0.1).step()
    assert not torch.equal(block[0].weight, before)

    # Changing a repetition's structure leaves the block and the other repetitions alone.
    repeated[0].append(torch.nn.Tanh())
    assert (len(block), len(repeated[0]), len(repeated[1])) == (3, 4, 3)


def test_share_mode_rebuilds_nested_containers_at_any_depth() -> None:
    inner = torch.nn.Linear(2, 2)
    listed = torch.nn.Linear(2, 2)
    keyed = torch.nn.Linear(2, 2)
    scale = Scale()
    block = ExtendedSequential(
        torch.nn.Sequential(inner, torch.nn.Sequential(torch.nn.ReLU(), scale)),
        torch.nn.ModuleList([listed, torch.nn.ModuleDict({"proj": keyed})]),
    )
    repeated = block.repeat(2, mode="share")
    for child in repeated:
        assert child is not block
        assert type(child[0]) is torch.nn.Sequential
        assert child[0] is not block[0]
        assert child[0][1] is not block[0][1]
        assert type(child[1]) is torch.nn.ModuleList
        assert child[1] is not block[1]
        assert type(child[1][1]) is torch.nn.ModuleDict
        assert child[1][1] is not block[1][1]
        # The leaves holding parameters are the block's own.
        assert child[0][0] is inner
        assert child[0][1][1] is scale
        assert child[1][0] is listed
        assert child[1][1]["proj"] is keyed
    assert repeated[0][0] is not repeated[1][0]
    assert list(repeated.state_dict()) == [
        f"{i}.{key}" for i in range(2) for key in block.state_dict()
    ]
    assert {id(p) for p in repeated.parameters()} == {id(p) for p in block.parameters()}


def test_zero_repetitions_give_an_empty_sequential() -> None:
    repeated = _block().repeat(0)
    assert isinstance(repeated, ExtendedSequential)
    assert len(repeated) == 0


@pytest.mark.parametrize(
    ("n_repeat", "mode", "error", "match"),
    [
        (-1, "init", ValueError, "n_repeat must be >= 0, got -1"),
        (2, "deep", ValueError, "mode must be one of 'init', 'copy' or 'share', got 'deep'"),
        (2.0, "init", TypeError, r"n_repeat must be an int, got 2\.0"),
        (True, "copy", TypeError, "n_repeat must be an int, got True"),
    ],
)
def test_invalid_arguments_are_rejected(
    n_repeat: Any, mode: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        _block().repeat(n_repeat, mode=mode)


class Scale(torch.nn.Module):
    """A module with a parameter but no reset_parameters()."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def test_init_mode_warns_about_modules_it_cannot_reinitialize() -> None:
    block = ExtendedSequential(torch.nn.Linear(2, 2), Scale())
    with pytest.warns(UserWarning, match=r"_reset_parameters\(\).*: 1 \(Scale\)") as record:
        repeated = block.repeat(3, mode="init")
    assert len(record) == 1
    assert record[0].filename == __file__
    assert all(child[1].scale.item() == 2.0 for child in repeated)


class Offset(torch.nn.Module):
    """A module with a buffer but no reset_parameters()."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.full((2,), 3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.offset


class Square(torch.nn.Module):
    """A module with neither parameters nor buffers."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


class ScaledLinear(torch.nn.Module):
    """A module whose reset_parameters() also covers a child without one."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.scale = Scale()

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()
        with torch.no_grad():
            self.scale.scale.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.linear(x))


def test_init_mode_warns_about_buffers_it_cannot_reinitialize() -> None:
    block = ExtendedSequential(torch.nn.Linear(2, 2), Offset())
    with pytest.warns(UserWarning, match=r"values were copied instead: 1 \(Offset\)"):
        repeated = block.repeat(2, mode="init")
    torch.testing.assert_close(repeated[1][1].offset, torch.full((2,), 3.0))


def test_init_mode_is_silent_for_modules_without_state_or_covered_by_a_parent() -> None:
    block = ExtendedSequential(
        torch.nn.Linear(2, 2), Square(), torch.nn.ReLU(), torch.nn.Dropout(0.1), ScaledLinear()
    )
    repeated = block.repeat(2, mode="init")  # warnings are errors
    assert all(child[4].scale.scale.item() == 1.0 for child in repeated)


def test_init_mode_reinitializes_through_private_reset_parameters() -> None:
    torch.manual_seed(0)
    block = ExtendedSequential(torch.nn.MultiheadAttention(4, 2), torch.nn.LayerNorm(4))
    attention = block[0]
    with torch.no_grad():
        attention.in_proj_bias.fill_(1.0)
        attention.out_proj.bias.fill_(1.0)
        block[1].weight.fill_(5.0)

    repeated = block.repeat(2, mode="init")  # no warning: warnings are errors

    first, second = repeated[0][0], repeated[1][0]
    for copy in (first, second):
        assert not torch.equal(copy.in_proj_weight, attention.in_proj_weight)
        assert not torch.equal(copy.out_proj.weight, attention.out_proj.weight)
        # MultiheadAttention._reset_parameters zeroes the biases, and runs after its
        # out_proj's own reset as when the module is built.
        torch.testing.assert_close(copy.in_proj_bias, torch.zeros(12))
        torch.testing.assert_close(copy.out_proj.bias, torch.zeros(4))
    assert not torch.equal(first.in_proj_weight, second.in_proj_weight)
    torch.testing.assert_close(repeated[0][1].weight, torch.ones(4))
    x = torch.randn(3, 1, 4)
    output, _ = first(x, x, x)
    assert output.shape == (3, 1, 4)


def test_copy_mode_does_not_warn_about_modules_without_reset() -> None:
    block = ExtendedSequential(torch.nn.Linear(2, 2), Scale())
    block.repeat(2, mode="copy")  # warnings are errors


def test_lazy_repetitions_initialize_independently() -> None:
    block = ExtendedSequential(LazyLinear(None, 4), torch.nn.ReLU())
    repeated = block.repeat(2, mode="init")
    assert repeated(torch.zeros(1, 6)).shape == (1, 4)
    assert (repeated[0][0].in_features, repeated[1][0].in_features) == (6, 4)
    assert not torch.equal(repeated[0][0].bias, repeated[1][0].bias)
    assert block[0].in_features is None
