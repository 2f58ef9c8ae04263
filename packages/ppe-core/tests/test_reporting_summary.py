from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from pytorch_pfn_extras.reporting import DictSummary, Reporter, Summary, report

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)
weights = st.floats(min_value=0.01, max_value=100.0)


def _as(kind: str, value: float) -> Any:
    return {
        "float": lambda: value,
        "numpy": lambda: np.float64(value),
        "array": lambda: np.array(value),
        "tensor": lambda: torch.tensor(value, dtype=torch.float64),
        "callable": lambda: lambda: value,
    }[kind]()


KINDS = ["float", "numpy", "array", "tensor", "callable"]


def _check_statistic(value: Any, *, tensor: bool) -> float:
    """Check that ``value`` is a 0-d tensor (``tensor=True``) or a Python float; its value."""
    if tensor:
        assert isinstance(value, torch.Tensor) and value.dim() == 0
        return float(value)
    assert type(value) is float
    return value


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.tuples(finite, weights, st.sampled_from(KINDS)), min_size=1, max_size=150)
)
def test_weighted_statistics_match_numpy(values: list[tuple[float, float, str]]) -> None:
    summary = Summary()
    for value, weight, kind in values:
        summary.add(_as(kind, value), weight)
    xs = np.array([v for v, _, _ in values])
    ws = np.array([w for _, w, _ in values])
    mean = np.average(xs, weights=ws)
    std = math.sqrt(max(np.average(xs * xs, weights=ws) - mean * mean, 0.0))
    tensor = "tensor" in {kind for _, _, kind in values}
    got_mean, got_std = summary.make_statistics()
    assert _check_statistic(got_mean, tensor=tensor) == pytest.approx(mean, rel=1e-9, abs=1e-9)
    assert _check_statistic(got_std, tensor=tensor) == pytest.approx(std, rel=1e-6, abs=1e-4)
    got = _check_statistic(summary.compute_mean(), tensor=tensor)
    assert got == pytest.approx(mean, rel=1e-9, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.tuples(finite, st.sampled_from(KINDS)), min_size=1, max_size=200))
def test_unweighted_mean_of_mixed_values_matches_numpy(values: list[tuple[float, str]]) -> None:
    # More than 64 tensors exercises the batched on-device reduction.
    summary = Summary()
    for value, kind in values:
        summary.add(_as(kind, value))
    xs = np.array([v for v, _ in values])
    tensor = "tensor" in {kind for _, kind in values}
    mean, std = summary.make_statistics()
    assert _check_statistic(mean, tensor=tensor) == pytest.approx(xs.mean(), rel=1e-9, abs=1e-9)
    assert _check_statistic(std, tensor=tensor) == pytest.approx(xs.std(), rel=1e-6, abs=1e-4)


@pytest.mark.parametrize(
    ("dtype", "mean_dtype"),
    [
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
        (torch.int64, torch.float32),  # the default dtype
        (torch.bool, torch.float32),
    ],
)
def test_the_mean_of_tensors_is_a_tensor_of_their_dtype(
    dtype: torch.dtype, mean_dtype: torch.dtype
) -> None:
    summary = Summary()
    summary.add(torch.tensor(1, dtype=dtype))
    summary.add(torch.tensor(0, dtype=dtype))
    mean, std = summary.make_statistics()
    for value in (summary.compute_mean(), mean, std):
        assert isinstance(value, torch.Tensor)
        assert (value.dtype, value.shape, value.device) == (mean_dtype, (), torch.device("cpu"))
    assert (float(mean), float(std)) == (0.5, 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_tensors_of_any_dtype_are_accumulated_in_double_precision(dtype: torch.dtype) -> None:
    summary = Summary()
    for _ in range(1000):
        summary.add(torch.tensor(3, dtype=dtype))
    summary.add(torch.tensor(1, dtype=dtype), weight=torch.tensor(1000.0, dtype=dtype))
    mean = summary.compute_mean()
    assert isinstance(mean, torch.Tensor)
    assert float(mean) == 2.0


def test_the_mean_of_numbers_is_a_python_float() -> None:
    summary = DictSummary()
    summary.add({"int": 1, "float": 2.5, "numpy": np.float32(0.5), "pair": (1, 2)})
    summary.add({"int": 2, "float": 3.5, "numpy": np.array(1.5), "pair": (3.0, np.int64(2))})
    stats = summary.make_statistics()
    assert stats == {
        "int": 1.5,
        "int.std": 0.5,
        "float": 3.0,
        "float.std": 0.5,
        "numpy": 1.0,
        "numpy.std": 0.5,
        "pair": 2.0,
        "pair.std": 1.0,
    }
    assert all(type(value) is float for value in stats.values())
    assert all(type(value) is float for value in summary.compute_mean().values())


def test_adding_a_tensor_to_numbers_makes_the_mean_a_tensor() -> None:
    summary = Summary()
    summary.add(1.0)
    assert type(summary.compute_mean()) is float
    summary.add(torch.tensor(3.0))
    mean = summary.compute_mean()
    assert isinstance(mean, torch.Tensor) and float(mean) == 2.0
    weighted = Summary()
    weighted.add(5.0, weight=torch.tensor(2.0))  # a tensor weight also makes a tensor
    assert isinstance(weighted.compute_mean(), torch.Tensor)


def test_tensor_modified_in_place_after_add_keeps_its_added_value() -> None:
    summary = Summary()
    running = torch.tensor(1.0)
    summary.add(running)
    running += 100  # e.g. a parameter updated by the optimizer
    summary.add(running)
    assert float(summary.compute_mean()) == pytest.approx(51.0)


def test_callables_are_evaluated_when_the_summary_is_read() -> None:
    calls: list[int] = []

    def value() -> float:
        calls.append(1)
        return 4.0

    summary = Summary()
    summary.add(value)
    summary.add(2.0)
    assert calls == []
    assert summary.compute_mean() == 3.0
    assert calls == [1]
    assert summary.compute_mean() == 3.0  # evaluated once
    assert calls == [1]


def test_callable_returning_a_tensor_is_summarized() -> None:
    summary = Summary()
    summary.add(lambda: torch.tensor(5.0), weight=2)
    summary.add(1.0, weight=2)
    assert _check_statistic(summary.compute_mean(), tensor=True) == 3.0


def test_callable_returning_a_non_scalar_is_reported_when_read() -> None:
    summary = Summary()
    summary.add(lambda: torch.ones(3))
    with pytest.raises(
        ValueError, match=r"callable .* returned a non-scalar: Tensor of shape \(3,\)"
    ):
        summary.compute_mean()


@pytest.mark.parametrize(
    "value",
    [torch.ones(2), np.ones(3), "1.0", None, 1 + 2j],
    ids=["vector-tensor", "vector-array", "str", "none", "complex"],
)
def test_summary_add_rejects_non_scalars(value: Any) -> None:
    with pytest.raises(ValueError, match=r"Summary\.add expects a scalar"):
        Summary().add(value)


@pytest.mark.parametrize("weight", [torch.ones(2), np.ones(2), "2", None])
def test_summary_add_rejects_non_scalar_weights(weight: Any) -> None:
    with pytest.raises(ValueError, match="weight must be a scalar"):
        Summary().add(1.0, weight)


def test_empty_summary_has_no_mean() -> None:
    with pytest.raises(ValueError, match="total weight is 0"):
        Summary().compute_mean()
    with pytest.raises(ValueError, match="total weight is 0"):
        Summary().make_statistics()


def test_summary_state_dict_holds_python_floats_and_round_trips() -> None:
    summary = Summary()
    summary.add(torch.tensor(1.0))
    summary.add(3.0, weight=torch.tensor(3.0))
    summary.add(lambda: 2.0)
    state = summary.state_dict()
    assert state == {"_x": 12.0, "_x2": 32.0, "_n": 5.0}
    assert all(type(v) is float for v in state.values())
    restored = Summary()
    restored.load_state_dict(state)
    mean, std = summary.make_statistics()
    assert restored.make_statistics() == pytest.approx((float(mean), float(std)))
    restored.add(12.0)
    assert restored.compute_mean() == 4.0


def test_summary_load_state_dict_names_missing_keys() -> None:
    with pytest.raises(KeyError, match=r"\['_x2'\]"):
        Summary().load_state_dict({"_x": 1.0, "_n": 1.0})


def test_adding_summaries_merges_them_without_changing_either() -> None:
    a, b = Summary(), Summary()
    a.add(torch.tensor(1.0))
    a.add(lambda: 2.0)
    b.add(3.0, weight=torch.tensor(2.0))
    b.add(torch.tensor(5.0), weight=0.5)
    merged = a + b
    merged.add(torch.tensor(10.0))
    values = np.array([1.0, 2.0, 3.0, 5.0, 10.0])
    w = np.array([1.0, 1.0, 2.0, 0.5, 1.0])
    assert float(merged.compute_mean()) == pytest.approx(np.average(values, weights=w))
    assert float(a.compute_mean()) == 1.5
    assert float(b.compute_mean()) == pytest.approx(8.5 / 2.5)
    with pytest.raises(TypeError):
        _ = a + 1  # type: ignore[operator]


def test_dict_summary_keeps_scalars_and_skips_other_values() -> None:
    summary = DictSummary()
    summary.add(
        {
            "int": 1,
            "tensor": torch.tensor(2.0),
            "array": np.array(3.0),
            "numpy": np.float32(4.0),
            "callable": lambda: 5.0,
            "image": torch.zeros(3, 8, 8),
            "vector": np.zeros(4),
            "name": "resnet",
            "none": None,
            "triple": (1, 2, 3),
        }
    )
    means = summary.compute_mean()
    assert means == {"int": 1.0, "tensor": 2.0, "array": 3.0, "numpy": 4.0, "callable": 5.0}
    assert [key for key, value in means.items() if isinstance(value, torch.Tensor)] == ["tensor"]


def test_dict_summary_weighted_pairs() -> None:
    summary = DictSummary()
    summary.add({"loss": torch.tensor(1.0), "acc": (0.5, 10)})
    summary.add({"loss": torch.tensor(3.0), "acc": (torch.tensor(1.0), torch.tensor(30))})
    means = summary.compute_mean()
    assert {key: float(value) for key, value in means.items()} == {"loss": 2.0, "acc": 0.875}
    stats = summary.make_statistics()
    assert set(stats) == {"loss", "loss.std", "acc", "acc.std"}
    assert all(isinstance(value, torch.Tensor) for value in stats.values())
    assert float(stats["loss"]) == 2.0
    assert float(stats["loss.std"]) == 1.0
    assert float(stats["acc.std"]) == pytest.approx(math.sqrt(0.25 * 0.75 * 0.25))


@pytest.mark.parametrize("weight", [torch.ones(2), np.ones(3), [1], "w"])
def test_dict_summary_rejects_non_scalar_weights(weight: Any) -> None:
    with pytest.raises(ValueError, match="weight of 'acc' must be a scalar"):
        DictSummary().add({"acc": (1.0, weight)})


def test_dict_summary_rejects_non_scalar_value_in_a_pair() -> None:
    with pytest.raises(ValueError, match="'acc' \\(value, weight\\) pair is not a scalar"):
        DictSummary().add({"acc": (torch.ones(2), 1)})


def test_dict_summary_state_dict_round_trips_with_python_floats() -> None:
    summary = DictSummary()
    summary.add({"a": torch.tensor(1.0), "b": 2})
    summary.add({"a": torch.tensor(3.0), "c": lambda: 7.0})
    state = summary.state_dict()
    assert state == {
        "a": {"_x": 4.0, "_x2": 10.0, "_n": 2.0},
        "b": {"_x": 2.0, "_x2": 4.0, "_n": 1.0},
        "c": {"_x": 7.0, "_x2": 49.0, "_n": 1.0},
    }
    restored = DictSummary()
    restored.load_state_dict(state)
    expected = {key: float(value) for key, value in summary.make_statistics().items()}
    assert restored.make_statistics() == pytest.approx(expected)
    with pytest.raises(KeyError, match="_n"):
        DictSummary().load_state_dict({"a": {"_x": 1.0, "_x2": 1.0}})


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.tuples(finite, st.one_of(st.just(1), st.integers(1, 50), weights)), max_size=40
    )
)
def test_every_way_of_adding_a_number_keeps_the_same_sums(
    values: list[tuple[float, float]],
) -> None:
    # Summary.add, DictSummary.add of a number and of a (value, weight) pair, and a NumPy
    # weight (the weighted path) must all accumulate sum(w * v), sum(w * v * v), sum(w)
    # exactly as PPE does, in the order the values came.
    single, keyed, weighted = Summary(), DictSummary(), Summary()
    x = x2 = n = 0.0
    for value, weight in values:
        single.add(value, weight)
        keyed.add({"k": value} if weight == 1 else {"k": (value, weight)})
        weighted.add(value, np.float64(weight))
        x += weight * value
        x2 += weight * value * value
        n += weight
    expected = {"_x": x, "_x2": x2, "_n": n}
    assert single.state_dict() == expected
    assert weighted.state_dict() == expected
    assert keyed.state_dict() == ({"k": expected} if values else {})
    assert all(type(v) is float for v in single.state_dict().values())


def test_dict_summaries_merge_key_by_key() -> None:
    a, b = DictSummary(), DictSummary()
    a.add({"x": 1.0, "only_a": torch.tensor(5.0)})
    b.add({"x": torch.tensor(3.0), "only_b": 7})
    merged = a + b
    assert merged.compute_mean() == {"x": 2.0, "only_a": 5.0, "only_b": 7.0}
    merged.add({"x": 5.0})
    assert a.compute_mean() == {"x": 1.0, "only_a": 5.0}
    assert merged.compute_mean()["x"] == 3.0


class _HostReadRecorder(TorchFunctionMode):
    """Records every way of turning a tensor into Python data."""

    READS = frozenset({"item", "__float__", "__int__", "__bool__", "tolist", "numpy"})

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        name = getattr(func, "__name__", "")
        if name in self.READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


class _ScalarReadRecorder(TorchDispatchMode):
    """Records the dispatcher-level device-to-host scalar reads (the CUDA sync points)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        if "_local_scalar_dense" in str(func):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def _train_and_summarize(steps: int) -> tuple[DictSummary, list[torch.Tensor]]:
    summary = DictSummary()
    reporter = Reporter()
    model = torch.nn.Linear(4, 1)
    reporter.add_observer("main", model)
    x = torch.randn(16, 4)
    expected = []
    for step in range(steps):
        observation: dict[str, Any] = {}
        with reporter.scope(observation):
            loss = model(x).pow(2).mean()
            report({"loss": loss, "w": (loss * 2, torch.tensor(step + 1.0))}, model)
        expected.append(loss.detach().clone())
        summary.add(observation)
    return summary, expected


def test_reporting_and_summarizing_tensors_never_reads_them_on_the_host() -> None:
    with _HostReadRecorder() as functions, _ScalarReadRecorder() as dispatched:
        summary, losses = _train_and_summarize(130)  # crosses the batched reduction twice
        means = summary.compute_mean()
        stats = summary.make_statistics()
        merged = (summary + DictSummary()).compute_mean()
    assert functions.reads == []
    assert dispatched.reads == []
    expected = torch.stack(losses).mean()
    for value in (means["main/loss"], stats["main/loss"], merged["main/loss"]):
        torch.testing.assert_close(value, expected)


def test_state_dict_reads_the_host_with_one_transfer_per_device() -> None:
    summary, losses = _train_and_summarize(10)
    with _HostReadRecorder() as functions, _ScalarReadRecorder() as dispatched:
        state = summary.state_dict()
    assert functions.reads == ["tolist"]  # one tolist() of a stacked tensor for all the keys
    assert dispatched.reads == []  # no per-value .item()
    expected = torch.stack(losses).sum().item()
    assert state["main/loss"]["_x"] == pytest.approx(expected, rel=1e-6)


def test_adding_a_tensor_costs_one_copy_plus_amortized_reduction() -> None:
    summary = DictSummary()
    values = [torch.tensor(float(i)) for i in range(128)]
    with _ScalarReadRecorder() as dispatched:
        for v in values:
            summary.add({"loss": v})
    clones = [op for op in dispatched.ops if "clone" in op]
    assert len(clones) == 128
    assert len(dispatched.ops) - len(clones) <= 2 * 8  # two batched reductions of 64 values
    assert float(summary.compute_mean()["loss"]) == 63.5


@pytest.mark.gpu
def test_reporting_cuda_tensors_does_not_synchronize() -> None:
    summary = DictSummary()
    reporter = Reporter()
    model = torch.nn.Linear(4, 1).cuda()
    reporter.add_observer("main", model)
    x = torch.randn(16, 4, device="cuda")
    weights = torch.arange(1.0, 131.0, device="cuda")  # created before: a host copy syncs
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(130):
            observation: dict[str, Any] = {}
            with reporter.scope(observation):
                loss = model(x).pow(2).mean()
                report({"loss": loss, "w": (loss, weights[step])}, model)
            summary.add(observation)
        merged = summary + DictSummary()
        mean = merged.compute_mean()
        stats = summary.make_statistics()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert mean["main/loss"].device.type == "cuda"
    assert stats["main/w.std"].device.type == "cuda"
    assert mean["main/loss"].item() == pytest.approx(model(x).pow(2).mean().item(), rel=1e-5)
    assert set(summary.state_dict()) == {"main/loss", "main/w"}
