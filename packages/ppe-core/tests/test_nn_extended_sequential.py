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


def test_share_mode_repeats_the_same_module() -> None:
    block = _block()
    repeated = block.repeat(3, mode="share")
    assert all(child is block for child in repeated)
    assert len(list(repeated.parameters())) == len(list(block.parameters()))


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
    with pytest.warns(UserWarning, match=r"reset_parameters\(\).*: 1 \(Scale\)") as record:
        repeated = block.repeat(3, mode="init")
    assert len(record) == 1
    assert record[0].filename == __file__
    assert all(child[1].scale.item() == 2.0 for child in repeated)


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
