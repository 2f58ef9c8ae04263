"""``utils.comparer``: engines run side by side, and the first value where they diverge."""

from __future__ import annotations

import copy
import math
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
from pytorch_pfn_extras.utils.comparer import (
    Comparer,
    ModelComparer,
    OutputsComparer,
    get_default_comparer,
    intermediate_value,
)

ITERATIONS = 6  # 2 epochs of 3 batches


class Net(torch.nn.Module):
    """A tiny regressor that records its hidden activations for the comparer."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(4, 8)
        self.l2 = torch.nn.Linear(8, 1)
        self.fail_at = fail_at
        self.calls = 0

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"boom at call {self.calls}")
        h = torch.relu(self.l1(x))
        intermediate_value("hidden", h)
        y = self.l2(h).squeeze(-1)
        return {"loss": F.mse_loss(y, t), "y": y}


def make_data(n: int = 12) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    t = x.sum(dim=1)
    return [{"x": x[i], "t": t[i]} for i in range(n)]


def loader() -> torch.utils.data.DataLoader[Any]:
    return torch.utils.data.DataLoader(make_data(), batch_size=4)


def make_net(**kwargs: Any) -> Net:
    torch.manual_seed(0)
    return Net(**kwargs)


def make_trainer(
    model: torch.nn.Module,
    tmp_path: Path,
    *,
    lr: float = 0.1,
    max_epochs: int = 2,
    device: str = "cpu",
) -> ppe.training.Trainer:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    trainer = ppe.engine.create_trainer(
        model, optimizer, max_epochs, out_dir=str(tmp_path), device=device
    )
    ppe.runtime.to(model, device)
    return trainer


def make_evaluator(model: torch.nn.Module) -> ppe.training.Evaluator:
    evaluator = ppe.engine.create_evaluator(model)
    ppe.runtime.to(model, "cpu")
    return evaluator


def perturbed(model: Net, layer: str = "l2") -> Net:
    other = copy.deepcopy(model)
    with torch.no_grad():
        getattr(other, layer).weight[0, 0] += 0.5
    return other


class RecordingCompare:
    """A compare_fn that keeps what it was asked to compare, then compares by default."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self._compare = get_default_comparer()

    def __call__(self, backend1: str, backend2: str, name: str, val1: Any, val2: Any) -> None:
        self.calls.append((backend1, backend2, name))
        self._compare(backend1, backend2, name, val1, val2)

    @property
    def names(self) -> set[str]:
        return {name for _, _, name in self.calls}


def run_bounded(comparer: Comparer, timeout: float = 60.0) -> BaseException | None:
    """Run ``comparer.compare()`` in a thread; fail the test if it does not return in time."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            comparer.compare()
        except BaseException as error:
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "compare() hung"
    return outcome[0]


# ---------------------------------------------------------------------- trainers


@pytest.mark.parametrize("concurrency", [None, 1])
def test_identical_trainers_compare_every_value_at_every_iteration(
    tmp_path: Path, concurrency: int | None
) -> None:
    model = make_net()
    compare_fn = RecordingCompare()
    comparer = Comparer(compare_fn=compare_fn, params=True, concurrency=concurrency)
    comparer.add_engine("a", make_trainer(model, tmp_path), loader())
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.compare()
    names = {
        "intermediates/hidden",
        "outputs/loss",
        "outputs/y",
        "params/main/l1.weight",
        "params/main/l1.bias",
        "params/main/l2.weight",
        "params/main/l2.bias",
    }
    assert compare_fn.names == names
    assert len(compare_fn.calls) == ITERATIONS * len(names)
    assert {(a, b) for a, b, _ in compare_fn.calls} == {("a", "b")}


@pytest.mark.parametrize("concurrency", [None, 1])
def test_perturbed_weight_diverges_at_the_first_iteration(
    tmp_path: Path, concurrency: int | None
) -> None:
    model = make_net()
    comparer = Comparer(concurrency=concurrency)
    comparer.add_engine("a", make_trainer(model, tmp_path), loader())
    comparer.add_engine("b", make_trainer(perturbed(model), tmp_path), loader())
    with pytest.raises(
        AssertionError, match=r"'b' diverges from 'a' at iteration 1 on 'outputs/loss'"
    ):
        comparer.compare()


def test_another_learning_rate_diverges_after_the_first_step(tmp_path: Path) -> None:
    # The first step computes the same values; the updates differ, so the parameters
    # differ after iteration 1 and the activations at iteration 2.
    model = make_net()
    outputs_only = Comparer()
    outputs_only.add_engine("a", make_trainer(model, tmp_path), loader())
    outputs_only.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path, lr=0.2), loader())
    with pytest.raises(AssertionError, match=r"at iteration 2 on 'intermediates/hidden'") as info:
        outputs_only.compare()
    assert "'intermediates/hidden' of 'b' is not close to that of 'a'" in str(info.value)

    with_params = Comparer(params=["main/l2.weight"])
    with_params.add_engine("a", make_trainer(copy.deepcopy(model), tmp_path), loader())
    with_params.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path, lr=0.2), loader())
    with pytest.raises(AssertionError, match=r"at iteration 1 on 'params/main/l2.weight'"):
        with_params.compare()


@pytest.mark.gpu
def test_a_cuda_trainer_matches_its_cpu_twin(tmp_path: Path) -> None:
    model = make_net()
    cuda_trainer = make_trainer(copy.deepcopy(model), tmp_path, device="cuda")
    comparer = Comparer(params=True, compare_fn=get_default_comparer(rtol=1e-4, atol=1e-5))
    comparer.add_engine("cpu", make_trainer(model, tmp_path), loader())
    comparer.add_engine("cuda", cuda_trainer, loader())
    comparer.compare()
    assert cuda_trainer.iteration == ITERATIONS


def test_the_baseline_can_be_any_engine(tmp_path: Path) -> None:
    model = make_net()
    comparer = Comparer(baseline="b", concurrency=1)
    comparer.add_engine("a", make_trainer(perturbed(model), tmp_path), loader())
    comparer.add_engine("b", make_trainer(model, tmp_path), loader())
    comparer.add_engine("c", make_trainer(copy.deepcopy(model), tmp_path), loader())
    with pytest.raises(AssertionError, match=r"'a' diverges from 'b' at iteration 1"):
        comparer.compare()


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_engines_run_in_groups_are_compared_with_the_baseline(
    tmp_path: Path, concurrency: int
) -> None:
    model = make_net()
    compare_fn = RecordingCompare()
    comparer = Comparer(compare_fn=compare_fn, concurrency=concurrency)
    for name in ("a", "b", "c"):
        comparer.add_engine(name, make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.compare()
    pairs = {(a, b) for a, b, _ in compare_fn.calls}
    assert pairs == {("a", "b"), ("a", "c")}
    assert len(compare_fn.calls) == 2 * ITERATIONS * 3

    comparer = Comparer(concurrency=concurrency)
    comparer.add_engine("a", make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.add_engine("c", make_trainer(perturbed(model), tmp_path), loader())
    with pytest.raises(AssertionError, match=r"'c' diverges from 'a' at iteration 1"):
        comparer.compare()


def test_trigger_selects_the_compared_iterations(tmp_path: Path) -> None:
    model = make_net()
    compare_fn = RecordingCompare()
    comparer = Comparer(compare_fn=compare_fn, trigger=(1, "epoch"), outputs=["loss"])
    comparer.add_engine("a", make_trainer(model, tmp_path), loader())
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.compare()
    # Two epochs: the loss and the hidden activations of iterations 3 and 6.
    assert sorted(compare_fn.calls) == sorted(
        [("a", "b", "outputs/loss"), ("a", "b", "intermediates/hidden")] * 2
    )


@pytest.mark.parametrize("concurrency", [None, 1])
def test_engines_running_different_numbers_of_iterations_diverge(
    tmp_path: Path, concurrency: int | None
) -> None:
    model = make_net()
    comparer = Comparer(concurrency=concurrency)
    comparer.add_engine("a", make_trainer(model, tmp_path, max_epochs=2), loader())
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path, max_epochs=1), loader())
    error = run_bounded(comparer)
    assert isinstance(error, AssertionError)
    assert "'b'" in str(error) and "3" in str(error)


@pytest.mark.parametrize("failing", ["a", "b"])
@pytest.mark.parametrize("concurrency", [None, 1])
def test_an_engine_that_raises_stops_the_others(
    tmp_path: Path, failing: str, concurrency: int | None
) -> None:
    model = make_net()
    trainers = {}
    for name in ("a", "b", "c"):
        net = copy.deepcopy(model)
        net.fail_at = 3 if name == failing else None
        trainers[name] = make_trainer(net, tmp_path)
    comparer = Comparer(concurrency=concurrency)
    for name, trainer in trainers.items():
        comparer.add_engine(name, trainer, loader())
    error = run_bounded(comparer)
    assert isinstance(error, RuntimeError)
    assert str(error) == "boom at call 3"
    # Running together, the others stop at their next step; one after another, those after
    # the failing one do not start. Every handler is left as it was.
    if concurrency is None:
        assert all(trainer.iteration <= 3 for trainer in trainers.values())
    else:
        assert trainers["c"].iteration == 0
    for trainer in trainers.values():
        assert "train_step" not in vars(trainer.handler)
        assert "train_post_step" not in vars(trainer.handler)


def test_handlers_are_restored_after_a_comparison(tmp_path: Path) -> None:
    model = make_net()
    first, second = make_trainer(model, tmp_path), make_trainer(copy.deepcopy(model), tmp_path)
    comparer = Comparer()
    comparer.add_engine("a", first, loader())
    comparer.add_engine("b", second, loader())
    comparer.compare()
    for trainer in (first, second):
        assert not {"train_step", "train_post_step"} & set(vars(trainer.handler))
        assert trainer.iteration == ITERATIONS


# ---------------------------------------------------------------------- evaluators


@pytest.mark.parametrize("concurrency", [None, 1])
def test_evaluators_are_compared_batch_by_batch(concurrency: int | None) -> None:
    model = make_net()
    compare_fn = RecordingCompare()
    comparer = Comparer(compare_fn=compare_fn, concurrency=concurrency)
    comparer.add_engine("a", make_evaluator(model), loader())
    comparer.add_engine("b", make_evaluator(copy.deepcopy(model)), loader())
    comparer.compare()
    assert len(compare_fn.calls) == 3 * 3  # 3 batches: hidden, loss, y

    comparer = Comparer(concurrency=concurrency)
    comparer.add_engine("a", make_evaluator(model), loader())
    comparer.add_engine("b", make_evaluator(perturbed(model, "l1")), loader(), eval_len=2)
    with pytest.raises(AssertionError, match=r"at iteration 1 on 'intermediates/hidden'"):
        comparer.compare()


def test_epoch_triggers_need_a_trainer() -> None:
    model = make_net()
    comparer = Comparer(trigger=(1, "epoch"))
    comparer.add_engine("a", make_evaluator(model), loader())
    comparer.add_engine("b", make_evaluator(copy.deepcopy(model)), loader())
    with pytest.raises(ValueError, match="an evaluator has none"):
        comparer.compare()


# ---------------------------------------------------------------------- intermediate values


def test_intermediate_value_outside_a_comparison_does_nothing() -> None:
    model = make_net()
    intermediate_value("anything", torch.ones(2))
    intermediate_value(0, object())  # type: ignore[arg-type]  # not even checked
    out = model(**make_data(1)[0])
    assert set(out) == {"loss", "y"}


def test_intermediate_values_recorded_twice_in_a_step_are_compared_in_order() -> None:
    class TwoPasses(Net):
        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            first = super().forward(x, t)
            second = super().forward(x * 2, t)
            return {"loss": first["loss"] + second["loss"]}

    torch.manual_seed(0)
    model = TwoPasses()
    compare_fn = RecordingCompare()
    comparer = Comparer(compare_fn=compare_fn)
    comparer.add_engine("a", make_evaluator(model), loader())
    comparer.add_engine("b", make_evaluator(copy.deepcopy(model)), loader())
    comparer.compare()
    assert compare_fn.names == {
        "intermediates/hidden",
        "intermediates/hidden[1]",
        "outputs/loss",
    }


def test_intermediate_values_are_copied_when_recorded() -> None:
    # The model changes the recorded tensor in place afterwards, differently per engine.
    class InPlace(Net):
        def __init__(self, scale: float) -> None:
            super().__init__()
            self.scale = scale

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            h = self.l1(x)
            intermediate_value("h", h)
            h.mul_(self.scale)
            return {"y": h.sum()}

    torch.manual_seed(0)
    model = InPlace(1.0)
    other = copy.deepcopy(model)
    other.scale = 2.0
    compared: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def compare_fn(backend1: str, backend2: str, name: str, val1: Any, val2: Any) -> None:
        compared.append((name, val1, val2))

    comparer = Comparer(outputs=False, compare_fn=compare_fn)
    comparer.add_engine("a", make_evaluator(model), loader())
    comparer.add_engine("b", make_evaluator(other), loader())
    comparer.compare()
    # Each engine's values as recorded, before the model scaled them in place.
    with torch.no_grad():
        expected = [model.l1(batch["x"]) for batch in loader()]
    assert [name for name, _, _ in compared] == ["intermediates/h"] * len(expected)
    for (_, val1, val2), recorded in zip(compared, expected, strict=True):
        torch.testing.assert_close(val1, recorded, rtol=0, atol=0)
        torch.testing.assert_close(val2, recorded, rtol=0, atol=0)


# ---------------------------------------------------------------------- dumps


def test_compare_against_a_dump(tmp_path: Path) -> None:
    model = make_net()
    dump_dir = tmp_path / "dump"
    Comparer(params=True).dump(make_trainer(copy.deepcopy(model), tmp_path), dump_dir, loader())
    assert (dump_dir / "comparer_index.pt").is_file()
    assert len(list(dump_dir.glob("iteration_*.pt"))) == ITERATIONS

    # The dump as the baseline, compared step by step.
    comparer = Comparer(params=True)
    comparer.add_dump("saved", dump_dir)
    comparer.add_engine("same", make_trainer(copy.deepcopy(model), tmp_path), loader())
    comparer.compare()

    comparer = Comparer(params=True)
    comparer.add_dump("saved", dump_dir)
    comparer.add_engine("other", make_trainer(copy.deepcopy(model), tmp_path, lr=0.2), loader())
    with pytest.raises(
        AssertionError, match=r"'other' diverges from 'saved' at iteration 1 on 'params/main/l1"
    ):
        comparer.compare()

    # The dump compared with a live baseline, after its run.
    comparer = Comparer(params=True)
    comparer.add_engine("live", make_trainer(perturbed(model), tmp_path), loader())
    comparer.add_dump("saved", dump_dir)
    with pytest.raises(AssertionError, match=r"'saved' diverges from 'live' at iteration 1"):
        comparer.compare()


def test_a_dump_with_other_iterations_diverges(tmp_path: Path) -> None:
    model = make_net()
    short = make_trainer(copy.deepcopy(model), tmp_path, max_epochs=1)
    Comparer().dump(short, tmp_path / "short", loader())
    comparer = Comparer()
    comparer.add_dump("short", tmp_path / "short")
    comparer.add_engine("long", make_trainer(copy.deepcopy(model), tmp_path), loader())
    with pytest.raises(AssertionError, match=r"'short' recorded nothing at iteration 4"):
        comparer.compare()


def test_an_incomplete_dump_is_refused(tmp_path: Path) -> None:
    model = make_net(fail_at=2)
    with pytest.raises(RuntimeError, match="boom"):
        Comparer().dump(make_evaluator(model), tmp_path / "failed", loader())
    with pytest.raises(ValueError, match="not a complete comparer dump"):
        Comparer().add_dump("failed", tmp_path / "failed")


# ---------------------------------------------------------------------- older API


def test_outputs_comparer_with_shared_or_per_engine_loaders(tmp_path: Path) -> None:
    model = make_net()
    compare_fn = RecordingCompare()
    engines = {
        "a": make_trainer(model, tmp_path),
        "b": make_trainer(copy.deepcopy(model), tmp_path),
    }
    OutputsComparer(engines, "loss", compare_fn=compare_fn).compare(loader())
    assert compare_fn.names == {"outputs/loss", "intermediates/hidden"}

    evaluators = {"a": make_evaluator(model), "b": make_evaluator(perturbed(model))}
    comparer = OutputsComparer(evaluators, ["y"], concurrency=1)
    with pytest.raises(
        AssertionError, match=r"'b' diverges from 'a' at iteration 1 on 'outputs/y'"
    ):
        comparer.compare({"a": (loader(),), "b": loader()}, eval_len=1)


def test_model_comparer_compares_parameters(tmp_path: Path) -> None:
    model = make_net()
    engines = {
        "a": make_trainer(model, tmp_path),
        "b": make_trainer(copy.deepcopy(model), tmp_path, lr=0.2),
    }
    with pytest.raises(AssertionError, match=r"at iteration 1 on 'params/main/l1.weight'"):
        ModelComparer(engines).compare(loader())


# ---------------------------------------------------------------------- compare_fn and errors


def test_default_comparer_tolerances() -> None:
    compare = get_default_comparer(rtol=1e-2, atol=1e-3)
    compare("a", "b", "x", torch.tensor([1.0, 0.0]), torch.tensor([1.005, 0.0005]))
    compare("a", "b", "x", torch.tensor([math.nan]), torch.tensor([math.nan]))
    compare("a", "b", "x", torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))
    with pytest.raises(AssertionError, match=r"'x' of 'b' is not close to that of 'a'"):
        compare("a", "b", "x", torch.tensor([1.0]), torch.tensor([1.1]))
    with pytest.raises(AssertionError):
        get_default_comparer(equal_nan=False)("a", "b", "x", math.nan, math.nan)


def test_invalid_configurations_are_refused(tmp_path: Path) -> None:
    model = make_net()
    trainer = make_trainer(model, tmp_path)
    comparer = Comparer(baseline="missing")
    comparer.add_engine("a", trainer, loader())
    with pytest.raises(ValueError, match="at least two"):
        comparer.compare()
    with pytest.raises(ValueError, match="already used"):
        comparer.add_engine("a", make_trainer(copy.deepcopy(model), tmp_path))
    with pytest.raises(ValueError, match="shares the handler"):
        comparer.add_engine("again", trainer)
    with pytest.raises(TypeError, match="create_trainer"):
        comparer.add_engine("model", model)  # type: ignore[arg-type]
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path), loader())
    with pytest.raises(ValueError, match="baseline 'missing'"):
        comparer.compare()
    with pytest.raises(ValueError, match="concurrency"):
        Comparer(concurrency=0)
    with pytest.raises(TypeError, match="outputs"):
        Comparer(outputs=[1])  # type: ignore[list-item]


def test_unknown_output_names_are_reported_with_the_engine(tmp_path: Path) -> None:
    model = make_net()
    comparer = Comparer(outputs=["acc"])
    comparer.add_engine("a", make_trainer(model, tmp_path), loader())
    comparer.add_engine("b", make_trainer(copy.deepcopy(model), tmp_path), loader())
    error = run_bounded(comparer)
    assert isinstance(error, ValueError)
    assert "no output named ['acc']" in str(error)
    assert "'loss'" in str(error)
