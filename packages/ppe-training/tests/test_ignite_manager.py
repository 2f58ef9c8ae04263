"""IgniteExtensionsManager driving real pytorch-ignite engines."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.training as training
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import IgniteExtensionsManager, make_extension
from pytorch_pfn_extras.training import extensions as ext

with warnings.catch_warnings():  # torch.distributed.optim's TorchScript deprecation warnings
    warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
    from ignite.engine import Engine, Events, create_supervised_trainer

EPOCH_LENGTH = 5


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
        for _ in range(EPOCH_LENGTH)
    ]


def _setup(
    out_dir: Path, max_epochs: int = 4, extensions: list[Any] | None = None
) -> tuple[Engine, IgniteExtensionsManager, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.functional.mse_loss)
    manager = IgniteExtensionsManager(
        trainer,
        model,
        optimizer,
        max_epochs,
        out_dir=str(out_dir),
        extensions=[ext.LogReport(), *(extensions or [])],
    )

    @trainer.on(Events.ITERATION_COMPLETED)
    def report_loss(engine: Engine) -> None:
        reporting.report({"train/loss": engine.state.output})

    return trainer, manager, model


def _log_without_time(manager: IgniteExtensionsManager) -> list[dict[str, Any]]:
    log = manager.get_extension("LogReport").log
    return [{k: v for k, v in entry.items() if k != "elapsed_time"} for entry in log]


def test_reference_docs_usage_logs_the_reported_loss(tmp_path: Path) -> None:
    trainer, manager, _ = _setup(tmp_path, max_epochs=3)
    losses: list[float] = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda engine: losses.append(engine.state.output)
    )
    assert not manager.stop_trigger  # reading it before the run starts nothing
    trainer.run(_data(), max_epochs=3)
    assert manager.stop_trigger
    assert training.IgniteExtensionsManager is IgniteExtensionsManager
    assert manager.engine is trainer
    assert (manager.iteration, manager.epoch, manager.iters_per_epoch) == (15, 3, EPOCH_LENGTH)
    log = manager.get_extension("LogReport").log
    assert [(e["epoch"], e["iteration"]) for e in log] == [(1, 5), (2, 10), (3, 15)]
    for i, entry in enumerate(log):
        expected = sum(losses[i * EPOCH_LENGTH : (i + 1) * EPOCH_LENGTH]) / EPOCH_LENGTH
        assert entry["train/loss"] == pytest.approx(expected)
    assert (tmp_path / "log").exists()


def test_extensions_run_after_user_handlers_and_see_their_reports(tmp_path: Path) -> None:
    order: list[str] = []
    seen: list[float] = []

    @make_extension(trigger=(1, "iteration"))
    def record(manager: Any) -> None:
        order.append("extension")
        seen.append(manager.observation["train/loss"])

    trainer, _manager, _ = _setup(tmp_path, max_epochs=1, extensions=[record])

    @trainer.on(Events.ITERATION_COMPLETED)
    def registered_after_the_manager(engine: Engine) -> None:
        order.append("user")

    outputs: list[float] = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda engine: outputs.append(engine.state.output)
    )
    trainer.run(_data(), max_epochs=1)
    assert order == ["user", "extension"] * EPOCH_LENGTH
    assert seen == outputs


def test_extension_reaches_the_engine_through_the_manager(tmp_path: Path) -> None:
    engines: list[Any] = []

    @make_extension(trigger=(1, "epoch"))
    def grab(manager: Any) -> None:
        engines.append((manager.engine, manager.engine.state.epoch))

    trainer, _, _ = _setup(tmp_path, max_epochs=2, extensions=[grab])
    trainer.run(_data(), max_epochs=2)
    assert engines == [(trainer, 1), (trainer, 2)]


def test_epoch_length_comes_from_the_run(tmp_path: Path) -> None:
    trainer, manager, _ = _setup(tmp_path, max_epochs=2)
    trainer.run(iter(_data() * 2), max_epochs=2, epoch_length=4)
    assert manager.iters_per_epoch == 4
    assert [e["iteration"] for e in manager.get_extension("LogReport").log] == [4, 8]


def test_data_without_length_needs_epoch_length(tmp_path: Path) -> None:
    trainer, _, _ = _setup(tmp_path, max_epochs=1)
    with pytest.raises(ValueError, match=r"pass epoch_length= to engine\.run"):
        trainer.run(iter(_data()), max_epochs=1)


def _crash_at(trainer: Engine, iteration: int) -> None:
    @trainer.on(Events.ITERATION_COMPLETED(once=iteration))
    def crash(engine: Engine) -> None:
        raise RuntimeError("simulated crash")


@pytest.mark.parametrize("resume_epoch", [0, 2])
def test_resume_from_a_state_dict_matches_the_uninterrupted_run(
    tmp_path: Path, resume_epoch: int
) -> None:
    reference_trainer, reference, reference_model = _setup(tmp_path / "reference")
    reference_trainer.run(_data(), max_epochs=4)

    snapshot = ext.snapshot(filename="snap_{.iteration}")
    trainer, manager, _ = _setup(tmp_path / "run", extensions=[snapshot])
    _crash_at(trainer, resume_epoch * EPOCH_LENGTH + 2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.run(_data(), max_epochs=4)
    assert manager.iteration == resume_epoch * EPOCH_LENGTH + 1  # the failed one is not counted

    trainer, manager, model = _setup(tmp_path / "run", extensions=[ext.snapshot()])
    if resume_epoch:
        state = torch.load(tmp_path / "run" / f"snap_{resume_epoch * EPOCH_LENGTH}")
        manager.load_state_dict(state)
    first: list[int] = []
    trainer.add_event_handler(
        Events.ITERATION_STARTED(once=resume_epoch * EPOCH_LENGTH + 1),
        lambda engine: first.append(engine.state.epoch),
    )
    trainer.run(_data(), max_epochs=4)
    assert first == [resume_epoch + 1]
    assert trainer.state.iteration == manager.iteration == 4 * EPOCH_LENGTH
    assert _log_without_time(manager) == _log_without_time(reference)
    for p, q in zip(model.parameters(), reference_model.parameters()):
        torch.testing.assert_close(p, q)


def test_resume_in_the_middle_of_an_epoch_keeps_the_counts(tmp_path: Path) -> None:
    trainer, manager, _ = _setup(tmp_path)
    manager.extend(ext.snapshot(filename="snap_{.iteration}"), trigger=(1, "iteration"))
    _crash_at(trainer, EPOCH_LENGTH + 3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.run(_data(), max_epochs=3)

    trainer, manager, _ = _setup(tmp_path, max_epochs=3)
    manager.extend(ext.snapshot(filename="snap_{.iteration}"), trigger=(1, "iteration"))
    manager.load_state_dict(torch.load(tmp_path / f"snap_{EPOCH_LENGTH + 2}"))
    seen: list[tuple[int, int]] = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED,
        lambda engine: seen.append((engine.state.iteration, engine.state.epoch)),
    )
    trainer.run(_data(), max_epochs=3)
    expected_iterations = list(range(EPOCH_LENGTH + 3, 3 * EPOCH_LENGTH + 1))
    assert [i for i, _ in seen] == expected_iterations
    assert [e for _, e in seen] == [(i - 1) // EPOCH_LENGTH + 1 for i in expected_iterations]
    log = manager.get_extension("LogReport").log
    assert [(e["epoch"], e["iteration"]) for e in log] == [(1, 5), (2, 10), (3, 15)]


def test_autoloaded_snapshot_moves_the_engine_forward(tmp_path: Path) -> None:
    trainer, _, _ = _setup(tmp_path, extensions=[ext.snapshot(autoload=True)])
    _crash_at(trainer, 2 * EPOCH_LENGTH + 1)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.run(_data(), max_epochs=4)

    trainer, manager, _ = _setup(tmp_path, extensions=[ext.snapshot(autoload=True)])
    processed: list[int] = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda engine: processed.append(engine.state.iteration)
    )
    trainer.run(_data(), max_epochs=4)
    assert processed == list(range(2 * EPOCH_LENGTH + 1, 4 * EPOCH_LENGTH + 1))
    assert manager.epoch == 4


def test_extensions_start_when_the_engine_runs_not_before(tmp_path: Path) -> None:
    lengths: list[int] = []

    class Probe(training.Extension):
        def initialize(self, manager: Any) -> None:
            lengths.append(manager.iters_per_epoch)

        def __call__(self, manager: Any) -> None:
            pass

    trainer, manager, _ = _setup(tmp_path, max_epochs=1, extensions=[Probe()])
    assert not manager.stop_trigger  # reading it does not start the extensions
    assert lengths == []
    trainer.run(_data(), max_epochs=1)
    assert lengths == [EPOCH_LENGTH]


def test_resuming_a_finished_run_does_no_iteration(tmp_path: Path) -> None:
    trainer, manager, _ = _setup(tmp_path, max_epochs=2)
    trainer.run(_data(), max_epochs=2)
    state = manager.state_dict()

    trainer, manager, _ = _setup(tmp_path, max_epochs=2)
    manager.load_state_dict(state)
    processed: list[int] = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda engine: processed.append(engine.state.iteration)
    )
    trainer.run(_data(), max_epochs=2)
    assert processed == []
    assert manager.iteration == 2 * EPOCH_LENGTH


class _Watcher(training.Extension):
    trigger = (1, "iteration")

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.errors: list[BaseException] = []
        self.finalized = 0

    def __call__(self, manager: Any) -> None:
        self.calls.append(manager.iteration)

    def on_error(self, manager: Any, exc: BaseException, tb: Any) -> None:
        self.errors.append(exc)

    def finalize(self, manager: Any) -> None:
        self.finalized += 1


def test_exception_calls_on_error_once_finalizes_and_propagates(tmp_path: Path) -> None:
    watcher = _Watcher()
    trainer, _, _ = _setup(tmp_path, extensions=[watcher])
    _crash_at(trainer, 7)
    with pytest.raises(RuntimeError, match="simulated crash") as info:
        trainer.run(_data(), max_epochs=4)
    assert watcher.errors == [info.value]
    assert watcher.finalized == 1
    assert watcher.calls == list(range(1, 7))


def test_exception_raised_by_an_extension_propagates(tmp_path: Path) -> None:
    @make_extension(trigger=(3, "iteration"))
    def broken(manager: Any) -> None:
        raise ValueError("extension failed")

    watcher = _Watcher()
    trainer, _, _ = _setup(tmp_path, extensions=[broken, watcher])
    with pytest.raises(ValueError, match="extension failed"):
        trainer.run(_data(), max_epochs=4)
    assert len(watcher.errors) == 1
    assert watcher.finalized == 1


def test_user_exception_handler_decides_and_training_stops(tmp_path: Path) -> None:
    watcher = _Watcher()
    trainer, _, _ = _setup(tmp_path, extensions=[watcher])
    handled: list[BaseException] = []
    trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, e: handled.append(e))
    _crash_at(trainer, 7)
    trainer.run(_data(), max_epochs=4)  # the user's handler swallows the error
    assert [str(e) for e in handled] == ["simulated crash"]
    assert len(watcher.errors) == 1
    assert watcher.calls == list(range(1, 7))  # no extension after the failed iteration
    assert watcher.finalized == 1


def test_manager_stop_trigger_terminates_a_longer_engine_run(tmp_path: Path) -> None:
    watcher = _Watcher()
    trainer, manager, _ = _setup(tmp_path, max_epochs=2, extensions=[watcher])
    trainer.run(_data(), max_epochs=5)
    assert trainer.state.iteration == manager.iteration == 2 * EPOCH_LENGTH
    assert watcher.finalized == 1


def test_same_length_runs_every_epoch_completed_handler(tmp_path: Path) -> None:
    trainer, _, _ = _setup(tmp_path, max_epochs=3)
    epochs: list[int] = []
    trainer.add_event_handler(
        Events.EPOCH_COMPLETED, lambda engine: epochs.append(engine.state.epoch)
    )
    trainer.run(_data(), max_epochs=3)
    assert epochs == [1, 2, 3]


def test_engine_terminate_finalizes_the_extensions(tmp_path: Path) -> None:
    watcher = _Watcher()
    trainer, _, _ = _setup(tmp_path, extensions=[watcher])
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=3), lambda engine: engine.terminate())
    trainer.run(_data(), max_epochs=4)
    assert watcher.calls == [1, 2, 3]
    assert watcher.finalized == 1


def test_a_shorter_engine_run_can_be_continued(tmp_path: Path) -> None:
    watcher = _Watcher()
    trainer, manager, _ = _setup(tmp_path, max_epochs=4, extensions=[watcher])
    trainer.run(_data(), max_epochs=2)
    assert watcher.finalized == 0
    trainer.run(_data(), max_epochs=4)
    assert watcher.finalized == 1
    assert watcher.calls == list(range(1, 4 * EPOCH_LENGTH + 1))
    assert [e["epoch"] for e in manager.get_extension("LogReport").log] == [1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="create a new manager"):
        trainer.run(_data(), max_epochs=6)


def test_enable_profile_records_each_extension(tmp_path: Path) -> None:
    from pytorch_pfn_extras.profiler import get_time_summary

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.functional.mse_loss)
    IgniteExtensionsManager(
        trainer,
        model,
        optimizer,
        1,
        out_dir=str(tmp_path),
        extensions=[ext.LogReport()],
        enable_profile=True,
    )
    get_time_summary().summary(clear=True)
    trainer.run(_data(), max_epochs=1)
    stats, extrema = get_time_summary().summary(clear=True)
    assert "extension:LogReport" in stats.compute_mean()
    assert "extension:LogReport.max" in extrema


def test_rejects_an_engine_that_is_not_an_ignite_engine(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"needs an ignite\.engine\.Engine as engine, got object"):
        IgniteExtensionsManager(object(), model, optimizer, 1, out_dir=str(tmp_path))  # type: ignore[arg-type]


def test_missing_ignite_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "ignite" or m.startswith("ignite.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ignite", None)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ImportError, match=r'pip install "ppe-training\[ignite\]"'):
        IgniteExtensionsManager(object(), model, optimizer, 1, out_dir=str(tmp_path))  # type: ignore[arg-type]
