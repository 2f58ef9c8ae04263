"""``distributed=True`` extensions in one process: a group of one, and their errors.

The reductions over several processes are checked by ``test_distributed_training.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.engine as ppe_engine
import pytorch_pfn_extras.training
from pytorch_pfn_extras import reporting, runtime
from pytorch_pfn_extras.training import ExtensionsManager, extensions


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(variable, raising=False)


def _run(tmp_path: Path, *extension: Any, iterations: int = 4) -> ExtensionsManager:
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=2, out_dir=str(tmp_path))
    for ext in extension:
        manager.extend(ext)
    for i in range(iterations):
        with manager.run_iteration():
            reporting.report({"loss": torch.tensor(float(i)), "count": i})
    return manager


def _without_time(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k != "elapsed_time"} for entry in log]


def test_distributed_log_report_of_one_process_logs_the_local_means(tmp_path: Path) -> None:
    local, distributed = extensions.LogReport(), extensions.LogReport(distributed=True)
    _run(tmp_path / "a", local)
    _run(tmp_path / "b", distributed)
    assert _without_time(distributed.log) == _without_time(local.log)
    assert [entry["loss"] for entry in distributed.log] == [0.5, 2.5]


def test_a_partial_interval_saved_by_another_rank_is_not_loaded(tmp_path: Path) -> None:
    saved = extensions.LogReport(distributed=True)
    _run(tmp_path / "a", saved, iterations=1)  # one value of the interval pending
    state = saved.state_dict()
    assert state["rank"] == 0
    for owner, expected in ((0, [1.0]), (1, [2.0])):  # (0 + 2) / 2, or 2 alone
        resumed = extensions.LogReport(distributed=True)
        resumed.load_state_dict({**state, "rank": owner})
        manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path / "b"))
        manager.extend(resumed)
        manager.iteration = 1
        with manager.run_iteration():
            reporting.report({"loss": 2.0})
        assert [entry["loss"] for entry in resumed.log] == expected


def test_a_local_log_report_loads_every_partial_interval(tmp_path: Path) -> None:
    saved = extensions.LogReport(distributed=True)
    _run(tmp_path / "a", saved, iterations=1)
    local = extensions.LogReport()
    local.load_state_dict({**saved.state_dict(), "rank": 1})
    assert "rank" not in local.state_dict()
    assert local.state_dict()["summary"] == saved.state_dict()["summary"]


def test_distributed_observe_value_of_one_process_records_the_value(tmp_path: Path) -> None:
    log = extensions.LogReport()
    _run(
        tmp_path,
        extensions.observe_value("epoch_seen", lambda m: m.epoch, distributed=True),
        log,
    )
    assert [entry["epoch_seen"] for entry in log.log] == [1, 2]


def test_distributed_observe_value_rejects_what_cannot_be_averaged(tmp_path: Path) -> None:
    observe = extensions.observe_value("name", lambda m: "text", distributed=True)
    with pytest.raises(TypeError, match=r"observe_value\('name'.*must be a number or a tensor"):
        _run(tmp_path, observe)


def test_distributed_features_under_a_launcher_need_a_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")  # as mpirun sets it
    with pytest.raises(RuntimeError, match=r"OMPI_COMM_WORLD_SIZE=4.*initialize_ompi_environment"):
        _run(tmp_path, extensions.LogReport(distributed=True))


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": self.linear(x).pow(2).mean()}


def _loader() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(size, 3, generator=generator) for size in (4, 4, 1)]


def test_the_distributed_engine_evaluator_of_one_process_is_the_evaluator() -> None:
    model = _Model()
    runtime.to(model, "cpu")
    options = {"eval_report_keys": ["loss"]}
    local = ppe_engine.create_evaluator(model, options=options)
    distributed = ppe_engine.create_evaluator(model, options=options, distributed=True)
    assert isinstance(distributed, pytorch_pfn_extras.training.DistributedEvaluator)
    assert not isinstance(local, pytorch_pfn_extras.training.DistributedEvaluator)
    reporter = reporting.Reporter()
    with reporter, reporter.scope({}):
        expected = local.run(_loader())
        got = distributed.run(_loader())
    assert float(got["val/loss"]) == pytest.approx(float(expected["val/loss"]))


def test_the_distributed_evaluator_extension_of_one_process_is_the_evaluator() -> None:
    model = _Model()

    def evaluate(x: torch.Tensor) -> None:
        reporting.report({"val/loss": model(x)["loss"]})

    local = extensions.Evaluator(_loader(), model, eval_func=evaluate)
    distributed = extensions.DistributedEvaluator(_loader(), model, eval_func=evaluate)
    reporter = reporting.Reporter()
    with reporter, reporter.scope({}):
        assert float(distributed()["val/loss"]) == pytest.approx(float(local()["val/loss"]))
    assert distributed.default_name == "validation"
