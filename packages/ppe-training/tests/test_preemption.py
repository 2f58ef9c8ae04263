"""PreemptionHandler in one process, with real signals (``os.kill`` of this process): where
the run stops, what it saves, the signal handlers it installs and restores, requeueing, the
Trainer and the Ignite manager. Several ranks under torchrun: test_preemption_dist.py."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
from pytorch_pfn_extras import reporting, writing
from pytorch_pfn_extras.training import (
    ExtensionEntry,
    ExtensionsManager,
    IgniteExtensionsManager,
    triggers,
)
from pytorch_pfn_extras.training import extensions as ext_module

SIGNAL = signal.SIGUSR1  # its default action ends the process: a test that fails to catch it shows
ITERS_PER_EPOCH = 5
LOGGER = "pytorch_pfn_extras.training.extensions.preemption"


@pytest.fixture(autouse=True)
def _keep_signal_handlers() -> Iterator[None]:
    """Every test leaves the signal handlers as it found them (and the check below proves the
    extension restores them itself)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)


def _batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(iteration)
    x = torch.randn(4, 3, generator=generator)
    return x, x.sum(1, keepdim=True)


def _manager(
    out: Path, *extensions: Any, epochs: int = 2, stop_trigger: Any = None
) -> ExtensionsManager:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = ExtensionsManager(
        model,
        optimizer,
        epochs,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=out,
        stop_trigger=stop_trigger,
    )
    for extension in extensions:
        manager.extend(extension)
    return manager


def _train(
    manager: ExtensionsManager,
    *,
    signal_at: int = 0,
    signum: int = SIGNAL,
) -> list[int]:
    """Run the loop, sending ``signum`` to this process during iteration ``signal_at``;
    return the iterations run."""
    model = manager.models["main"]
    optimizer = manager.optimizers["main"]
    ran = []
    while not manager.stop_trigger:
        with manager.run_iteration():
            number = manager.iteration + 1
            if signal_at == number:
                os.kill(os.getpid(), signum)
            x, t = _batch(manager.iteration)
            loss = torch.nn.functional.mse_loss(model(x), t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ppe_report(loss)
        ran.append(manager.iteration)
    return ran


def ppe_report(loss: torch.Tensor, key: str = "loss") -> None:
    reporting.report({key: loss.item()})


def _weights(manager: ExtensionsManager) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in manager.models["main"].state_dict().items()}


def _snapshot(trigger: Any = (100, "iteration"), **kwargs: Any) -> ExtensionEntry:
    """An autoloading snapshot, by default with a trigger that does not fire in the tests."""
    return ExtensionEntry(ext_module.snapshot(autoload=True, **kwargs), trigger=trigger)


class CountingWriter(writing.SimpleWriter):
    """A SimpleWriter that records the names it wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def __call__(self, filename: str, out_dir: str, target: Any, **kwargs: Any) -> None:
        self.written.append(filename)
        super().__call__(filename, out_dir, target, **kwargs)


# ---------------------------------------------------------------------- stopping and resuming


def test_a_signal_stops_the_run_after_its_iteration_with_a_snapshot_taken_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = signal.getsignal(SIGNAL)
    handler = ext_module.PreemptionHandler()
    manager = _manager(tmp_path, _snapshot(), ext_module.LogReport(trigger=(1, "iteration")))
    manager.extend(handler)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ran = _train(manager, signal_at=3)
    assert ran == [1, 2, 3]
    assert manager.stop_trigger
    assert handler.preempted and handler.stop_iteration == 3 and handler.received == SIGNAL
    assert sorted(os.listdir(tmp_path)) == ["log", "snapshot_iter_3"]
    assert "preempted: SIGUSR1 was received by this process; training stops at iteration 3" in (
        caplog.text
    )
    assert signal.getsignal(SIGNAL) is not before  # kept after a preemption, for repeats
    state = torch.load(tmp_path / "snapshot_iter_3", weights_only=True)
    assert state["_start_iteration"] == 3


def test_the_preempted_run_resumes_to_the_uninterrupted_weights_and_log(tmp_path: Path) -> None:
    reference = _manager(tmp_path / "reference", ext_module.LogReport(trigger=(1, "iteration")))
    _train(reference)
    for signal_at in (1, 4, 7):
        out = tmp_path / f"at_{signal_at}"
        first = _manager(out, _snapshot((4, "iteration")), ext_module.PreemptionHandler())
        first.extend(ext_module.LogReport(trigger=(1, "iteration")))
        assert _train(first, signal_at=signal_at)[-1] == signal_at
        second = _manager(out, _snapshot((4, "iteration")), ext_module.PreemptionHandler())
        second.extend(ext_module.LogReport(trigger=(1, "iteration")))
        assert _train(second)[0] == signal_at + 1
        for name, value in _weights(reference).items():
            assert torch.equal(_weights(second)[name], value), (signal_at, name)
        log = [(e["iteration"], e["loss"]) for e in second.get_extension("LogReport").log]
        expected = [(e["iteration"], e["loss"]) for e in reference.get_extension("LogReport").log]
        assert log == expected and len(log) == 10


def test_a_resumed_run_is_not_stopped_by_the_stop_that_the_snapshot_recorded(
    tmp_path: Path,
) -> None:
    # A stateful stop trigger records its own result; the preemption is not saved with it.
    def stop() -> Any:
        return triggers.EarlyStoppingTrigger(
            monitor="loss", patience=100, max_trigger=(10, "iteration")
        )

    snapshot, handler = _snapshot(), ext_module.PreemptionHandler()
    _train(_manager(tmp_path, snapshot, handler, stop_trigger=stop()), signal_at=2)
    snapshot, handler = _snapshot(), ext_module.PreemptionHandler()
    assert _train(_manager(tmp_path, snapshot, handler, stop_trigger=stop())) == list(range(3, 11))


def test_every_snapshot_extension_is_forced_once_and_one_that_ran_there_is_not_run_again(
    tmp_path: Path,
) -> None:
    writer = CountingWriter()
    model_snapshot = ext_module.snapshot_object(
        torch.nn.Linear(1, 1), "model_{.iteration}", writer=writer
    )
    manager = _manager(tmp_path, ext_module.PreemptionHandler())
    manager.extend(_snapshot((2, "iteration"), writer=writer))  # runs at 4 anyway
    manager.extend(model_snapshot, trigger=(1000, "iteration"))
    _train(manager, signal_at=4)
    assert writer.written == ["snapshot_iter_2", "snapshot_iter_4", "model_4"]


def test_the_stop_waits_for_background_writers_before_the_requeue(tmp_path: Path) -> None:
    seen: list[Any] = []

    def requeue(job_id: str | None) -> None:
        # Called once the manager is finalized: the snapshot written by a ThreadWriter and
        # LogReport's last entry are on disk.
        log = (tmp_path / "log").read_text()
        seen.append((job_id, sorted(os.listdir(tmp_path)), '"iteration": 6' in log))

    handler = ext_module.PreemptionHandler(requeue=True, requeue_command=requeue)
    manager = _manager(tmp_path, handler, ext_module.LogReport(trigger=(1, "iteration")))
    manager.extend(_snapshot(writer=writing.ThreadWriter()))
    _train(manager, signal_at=6)
    assert seen == [(None, ["log", "snapshot_iter_6"], True)]
    assert handler.requeued


def test_a_signal_before_the_first_iteration_stops_after_it(tmp_path: Path) -> None:
    handler = ext_module.PreemptionHandler()
    manager = _manager(tmp_path, _snapshot(), handler)
    assert not manager.stop_trigger  # starts the extensions: the handler is installed
    os.kill(os.getpid(), SIGNAL)
    assert _train(manager) == [1]
    assert handler.stop_iteration == 1
    assert os.listdir(tmp_path) == ["snapshot_iter_1"]


def _record_previous(received: list[int]) -> Any:
    """Install a handler of SIGNAL that records what it gets (the one the extension finds)."""
    return signal.signal(SIGNAL, lambda signum, frame: received.append(signum))


def test_a_signal_in_the_last_iteration_saves_it_and_a_repeat_after_the_run_is_absorbed(
    tmp_path: Path,
) -> None:
    received: list[int] = []
    previous = _record_previous(received)
    try:
        handler = ext_module.PreemptionHandler()
        manager = _manager(tmp_path, _snapshot(), handler, epochs=1)
        assert _train(manager, signal_at=ITERS_PER_EPOCH) == [1, 2, 3, 4, 5]
        assert handler.stop_iteration == ITERS_PER_EPOCH
        assert os.listdir(tmp_path) == [f"snapshot_iter_{ITERS_PER_EPOCH}"]
        os.kill(os.getpid(), SIGNAL)  # after the run (torchrun's late copy, say)
        assert received == []
    finally:
        signal.signal(SIGNAL, previous)


def test_the_run_ends_normally_without_a_signal_and_restores_the_handlers(
    tmp_path: Path,
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    handler = ext_module.PreemptionHandler(signals=(signal.SIGTERM, signal.SIGUSR2))
    manager = _manager(tmp_path, _snapshot(), handler, epochs=1)
    assert not manager.stop_trigger
    assert signal.getsignal(signal.SIGTERM) is not before  # installed
    assert _train(manager) == [1, 2, 3, 4, 5]
    assert not handler.preempted and handler.stop_iteration is None
    assert signal.getsignal(signal.SIGTERM) is before


class _SignallingWriter(writing.SimpleWriter):
    """Sends SIGNAL to this process when it writes (a repeat while the snapshot is saved)."""

    def __call__(self, filename: str, out_dir: str, target: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), SIGNAL)
        super().__call__(filename, out_dir, target, **kwargs)


def test_repeats_before_during_and_after_the_stop_are_absorbed_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Slurm signals every process of a job step and torchrun forwards its own copy: each
    # worker gets SIGTERM twice, or more, at any time. The run stops once, at the first.
    received: list[int] = []
    previous = _record_previous(received)
    try:
        handler = ext_module.PreemptionHandler()
        manager = _manager(tmp_path, handler)
        manager.extend(_snapshot(writer=_SignallingWriter()))
        with caplog.at_level(logging.INFO, logger=LOGGER):
            assert not manager.stop_trigger
            for _ in range(3):  # a burst, before the first iteration
                os.kill(os.getpid(), SIGNAL)
            assert _train(manager, signal_at=1) == [1]  # one more in it, one while saving
            os.kill(os.getpid(), SIGNAL)  # and one after the run
        assert received == []
        assert handler.preempted and handler.stop_iteration == 1 and handler.received == SIGNAL
        assert os.listdir(tmp_path) == ["snapshot_iter_1"]
        ignored = [r.getMessage() for r in caplog.records if "repeated signal" in r.getMessage()]
        assert len(ignored) == 1, ignored
        assert "ignored 3 repeated signal(s) (the last: SIGUSR1)" in ignored[0]
        assert caplog.text.count("preempted: ") == 1
    finally:
        signal.signal(SIGNAL, previous)


@pytest.mark.parametrize(("escalate_after", "given_back"), [(0, True), (3600.0, False)])
def test_escalate_after_gives_a_later_repeat_to_the_previous_handler(
    tmp_path: Path, escalate_after: float, given_back: bool
) -> None:
    received: list[int] = []
    previous = _record_previous(received)
    recorder = signal.getsignal(SIGNAL)
    try:
        handler = ext_module.PreemptionHandler(escalate_after=escalate_after)
        manager = _manager(tmp_path, _snapshot(), handler)
        assert not manager.stop_trigger
        os.kill(os.getpid(), SIGNAL)
        os.kill(os.getpid(), SIGNAL)
        assert received == ([SIGNAL] if given_back else [])
        # Given back, the previous handlers are restored; the first signal still stops.
        assert (signal.getsignal(SIGNAL) is recorder) is given_back
        assert _train(manager) == [1]
        assert handler.stop_iteration == 1
    finally:
        signal.signal(SIGNAL, previous)


@pytest.mark.parametrize("first", [signal.SIGINT, SIGNAL])
def test_a_second_sigint_interrupts_as_ctrl_c_twice_does(tmp_path: Path, first: int) -> None:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handler = ext_module.PreemptionHandler(signals=(SIGNAL, signal.SIGINT))
        manager = _manager(tmp_path, _snapshot(), handler)
        assert not manager.stop_trigger
        os.kill(os.getpid(), first)
        if first != signal.SIGINT:
            try:
                os.kill(os.getpid(), signal.SIGINT)  # one SIGINT: a repeat like any other
            except KeyboardInterrupt:
                pytest.fail("a single SIGINT after another signal interrupted the run")
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert handler.received == first
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


_SECOND_SIGNAL_WHILE_SAVING = """
import os, signal, sys, torch
from pytorch_pfn_extras import reporting, writing
from pytorch_pfn_extras.training import ExtensionsManager, extensions

class SignalledWriter(writing.SimpleWriter):
    def __call__(self, filename, out_dir, target, **kwargs):
        if filename == "snapshot_iter_3":  # the preemption's snapshot
            os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM while saving
        super().__call__(filename, out_dir, target, **kwargs)

escalate_after = None if sys.argv[2] == "None" else float(sys.argv[2])
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=10, out_dir=sys.argv[1])
manager.extend(extensions.snapshot(writer=SignalledWriter()), trigger=(2, "iteration"))
manager.extend(extensions.PreemptionHandler(escalate_after=escalate_after))
while not manager.stop_trigger:
    with manager.run_iteration():
        if manager.iteration == 2:
            os.kill(os.getpid(), signal.SIGTERM)
print("not killed")
"""


@pytest.mark.parametrize(
    ("escalate_after", "returncode", "snapshots"),
    [
        (None, 0, ["snapshot_iter_2", "snapshot_iter_3"]),
        # The explicit policy: every repeat ends the process, with the default action.
        (0, -signal.SIGTERM, ["snapshot_iter_2"]),
    ],
)
def test_a_second_sigterm_while_saving_is_absorbed_unless_escalate_after_says_otherwise(
    tmp_path: Path, escalate_after: float | None, returncode: int, snapshots: list[str]
) -> None:
    script = tmp_path / "second.py"
    script.write_text(_SECOND_SIGNAL_WHILE_SAVING)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(escalate_after)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == returncode, done.stderr
    assert ("not killed" in done.stdout) is (returncode == 0)
    # Killed, the periodic snapshot before is intact and the interrupted one left no file.
    names = sorted(n for n in os.listdir(tmp_path / "out") if not n.startswith("."))
    assert names == snapshots


def test_a_forked_child_ignores_the_signal_its_parent_handles(tmp_path: Path) -> None:
    handler = ext_module.PreemptionHandler()
    manager = _manager(tmp_path, _snapshot(), handler)
    assert not manager.stop_trigger
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say: the signal does not end it
        os.kill(os.getpid(), SIGNAL)
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    assert handler.received is None
    assert len(_train(manager)) == 2 * ITERS_PER_EPOCH


def test_outside_the_main_thread_signals_are_not_caught_but_notify_stops_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = signal.getsignal(SIGNAL)
    handler = ext_module.PreemptionHandler()
    manager = _manager(tmp_path, _snapshot(), handler)
    ran: list[list[int]] = []

    def train() -> None:
        manager.extend(
            lambda m: handler.notify() if m.iteration == 4 else None,
            name="notify",
            trigger=(1, "iteration"),
        )
        ran.append(_train(manager))

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        thread = threading.Thread(target=train)
        thread.start()
        thread.join()
    assert ran == [[1, 2, 3, 4]]
    assert signal.getsignal(SIGNAL) is before
    assert "signals are not caught (call notify() to stop the run)" in caplog.text
    assert handler.preempted and handler.received == signal.SIGTERM


def test_without_a_snapshot_extension_the_run_stops_and_says_nothing_is_saved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = _manager(tmp_path, ext_module.PreemptionHandler())
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert _train(manager, signal_at=2) == [1, 2]
    assert "the manager has no snapshot extension" in caplog.text
    assert "training stops at iteration 2 without a snapshot" in caplog.text


def test_an_asynchronous_sharded_save_in_flight_and_the_forced_one_are_committed(
    tmp_path: Path,
) -> None:
    sharded = ext_module.snapshot(
        snapshot_mode=ext_module.SnapshotMode.SHARDED, async_save=True, autoload=True
    )
    manager = _manager(tmp_path, ext_module.PreemptionHandler())
    manager.extend(sharded, trigger=(3, "iteration"))
    # The signal comes while the save of iteration 3 may still be writing.
    assert _train(manager, signal_at=4) == [1, 2, 3, 4]
    assert sorted(os.listdir(tmp_path)) == ["snapshot_iter_3", "snapshot_iter_4"]
    for name in ("snapshot_iter_3", "snapshot_iter_4"):
        assert (tmp_path / name / ".metadata").exists()
    weights = _weights(manager)
    resumed = _manager(tmp_path, ext_module.PreemptionHandler())
    resumed.extend(
        ext_module.snapshot(snapshot_mode=ext_module.SnapshotMode.SHARDED, autoload=True),
        trigger=(3, "iteration"),
    )
    assert not resumed.stop_trigger
    assert resumed.iteration == 4
    for name, value in weights.items():
        assert torch.equal(_weights(resumed)[name], value)


# ---------------------------------------------------------------------- requeue


def _requeue_recorder(tmp_path: Path) -> tuple[list[str], Path]:
    record = tmp_path / "requeued"
    code = f"import sys; open({str(record)!r}, 'w').write(' '.join(sys.argv[1:]))"
    return [sys.executable, "-c", code, "requeue", "{job_id}"], record


@pytest.mark.parametrize(
    ("environ", "job_id"),
    [
        ({"SLURM_JOB_ID": "41"}, "41"),
        ({"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "44", "SLURM_ARRAY_TASK_ID": "3"}, "44_3"),
    ],
)
def test_requeue_runs_the_command_with_the_slurm_job_once_the_state_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], job_id: str
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    command, record = _requeue_recorder(tmp_path)
    handler = ext_module.PreemptionHandler(requeue=True, requeue_command=command)
    _train(_manager(tmp_path / "out", _snapshot(), handler), signal_at=2)
    assert record.read_text() == f"requeue {job_id}"
    assert handler.requeued


def test_without_a_signal_or_without_requeue_nothing_is_requeued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    command, record = _requeue_recorder(tmp_path)
    handler = ext_module.PreemptionHandler(requeue=True, requeue_command=command)
    _train(_manager(tmp_path / "a", _snapshot(), handler, epochs=1))
    unasked = ext_module.PreemptionHandler(requeue_command=command)
    _train(_manager(tmp_path / "b", _snapshot(), unasked), signal_at=2)
    assert not record.exists()
    assert not handler.requeued and not unasked.requeued


def test_requeue_outside_slurm_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    handler = ext_module.PreemptionHandler(requeue=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _train(_manager(tmp_path, _snapshot(), handler), signal_at=2)
    assert "not running under Slurm (SLURM_JOB_ID is not set)" in caplog.text
    assert handler.preempted and not handler.requeued


def test_a_failing_requeue_command_is_logged_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    command = [sys.executable, "-c", "import sys; sys.exit('Invalid job id specified')"]
    handler = ext_module.PreemptionHandler(requeue=True, requeue_command=command)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _train(_manager(tmp_path, _snapshot(), handler), signal_at=2)
    assert "exited with 1: Invalid job id specified" in caplog.text
    assert handler.preempted and not handler.requeued
    assert os.listdir(tmp_path) == ["snapshot_iter_2"]


# ---------------------------------------------------------------------- Trainer and Ignite


class _Regressor(torch.nn.Module):
    """Sends the signal from its forward pass number ``signal_at`` (inside an iteration)."""

    def __init__(self, signal_at: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.calls = 0
        self.signal_at = signal_at

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.signal_at:
            os.kill(os.getpid(), SIGNAL)
        loss = torch.nn.functional.mse_loss(self.linear(x), t)
        ppe_report(loss, "train/loss")
        return {"loss": loss}


def _run_trainer(out: Path, signal_at: int = 0) -> tuple[Any, dict[str, torch.Tensor], Any]:
    torch.manual_seed(0)
    data = [{"x": x, "t": t} for x, t in (_batch(i) for i in range(ITERS_PER_EPOCH))]
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    model = _Regressor(signal_at)
    pytorch_pfn_extras.runtime.to(model, "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    handler = ext_module.PreemptionHandler()

    trainer = pytorch_pfn_extras.engine.create_trainer(
        model,
        optimizer,
        3,
        out_dir=out,
        extensions=[handler, ext_module.LogReport(trigger=(1, "iteration"))],
    )
    trainer.extend(_snapshot((1, "epoch")))
    trainer.run(loader)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    return trainer, weights, handler


def test_create_trainer_stops_mid_epoch_and_resumes_to_the_uninterrupted_weights(
    tmp_path: Path,
) -> None:
    reference, reference_weights, _ = _run_trainer(tmp_path / "reference")
    # The signal during iteration 7, in the middle of the second epoch.
    first, _, handler = _run_trainer(tmp_path / "run", signal_at=7)
    assert first.manager.iteration == 7 and handler.preempted
    assert "snapshot_iter_7" in os.listdir(tmp_path / "run")
    resumed, weights, _ = _run_trainer(tmp_path / "run")
    assert resumed.manager.iteration == 3 * ITERS_PER_EPOCH
    for name, value in reference_weights.items():
        assert torch.equal(weights[name], value), name
    log = [
        (e["iteration"], e["train/loss"]) for e in resumed.manager.get_extension("LogReport").log
    ]
    expected = reference.manager.get_extension("LogReport").log
    assert log == [(e["iteration"], e["train/loss"]) for e in expected]
    assert [i for i, _ in log] == list(range(1, 16))


def test_the_ignite_manager_terminates_the_engine_where_the_run_stopped(tmp_path: Path) -> None:
    engine_module = pytest.importorskip("ignite.engine")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(engine: Any, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        if engine.state.iteration == 6:
            os.kill(os.getpid(), SIGNAL)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return loss.item()

    engine = engine_module.Engine(step)
    handler = ext_module.PreemptionHandler()
    manager = IgniteExtensionsManager(
        engine, model, optimizer, 3, out_dir=tmp_path, extensions=[handler]
    )
    manager.extend(_snapshot((1, "epoch")))
    engine.run([_batch(i) for i in range(ITERS_PER_EPOCH)], max_epochs=3)
    assert engine.state.iteration == 6 and manager.iteration == 6
    assert handler.preempted and manager.stop_trigger
    assert sorted(os.listdir(tmp_path)) == ["snapshot_iter_5", "snapshot_iter_6"]


# ---------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("signals", "error", "match"),
    [
        ((), ValueError, "at least one signal"),
        ((signal.SIGKILL,), ValueError, "SIGKILL cannot be caught"),
        (("SIGTERM",), ValueError, "got 'SIGTERM'"),
        (7.5, TypeError, "got 7.5"),
    ],
)
def test_bad_signals_are_refused(signals: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ext_module.PreemptionHandler(signals=signals)


@pytest.mark.parametrize("command", ["scontrol requeue", [b"scontrol"], 3])
def test_a_bad_requeue_command_is_refused(command: Any) -> None:
    with pytest.raises(TypeError, match="requeue_command must be a sequence of strings"):
        ext_module.PreemptionHandler(requeue_command=command)


_BAD_SECONDS = [
    (-1, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),  # every rank failed later with an OverflowError
    ("0.1", TypeError),
    (True, TypeError),
]


@pytest.mark.parametrize(("interval", "error"), _BAD_SECONDS)
def test_a_bad_check_interval_is_refused(interval: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"check_interval must be a number of seconds.*{interval!r}"):
        ext_module.PreemptionHandler(check_interval=interval)


@pytest.mark.parametrize(("seconds", "error"), _BAD_SECONDS)
def test_a_bad_escalate_after_is_refused(seconds: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"escalate_after must be a number of seconds.*{seconds!r}"):
        ext_module.PreemptionHandler(escalate_after=seconds)


def test_requeue_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="requeue must be a bool, got 'yes'"):
        ext_module.PreemptionHandler(requeue="yes")  # type: ignore[arg-type]


def test_a_single_signal_number_is_accepted(tmp_path: Path) -> None:
    handler = ext_module.PreemptionHandler(signals=signal.SIGUSR2)  # type: ignore[arg-type]
    manager = _manager(tmp_path, _snapshot(), handler)
    assert _train(manager, signal_at=3, signum=signal.SIGUSR2) == [1, 2, 3]
