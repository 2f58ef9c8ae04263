"""How a run stops, in one process: each loop shape exits 0 after a preemption (real
processes, SIGTERM twice as Slurm and torchrun deliver it), a signal that comes after the
handler's last check is saved when training ends, a preemption saves every snapshot
extension whatever its condition and trigger state, and ``manager.request_stop``."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
from pytorch_pfn_extras.training import (
    PRIORITY_SNAPSHOT,
    ExtensionsManager,
    IgniteExtensionsManager,
    make_extension,
    triggers,
)
from pytorch_pfn_extras.training import extensions as ext_module

SIGNAL = signal.SIGUSR1  # its default action ends the process: a test that fails to catch it shows
ITERS_PER_EPOCH = 5
LOGGER = "pytorch_pfn_extras.training.extensions.preemption"


@pytest.fixture(autouse=True)
def _keep_signal_handlers() -> Iterator[None]:
    """Every test leaves the signal handlers as it found them (a preempted run keeps its
    handler installed until the process exits)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)


def _batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(iteration)
    x = torch.randn(4, 3, generator=generator)
    return x, x.sum(1, keepdim=True)


def _manager(out: Path, *extensions: Any, epochs: int = 2) -> ExtensionsManager:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(
        model, optimizer, epochs, iters_per_epoch=ITERS_PER_EPOCH, out_dir=out
    )
    for extension in extensions:
        manager.extend(extension)
    return manager


def _train(manager: ExtensionsManager, signal_at: int = 0) -> list[int]:
    """``while not manager.stop_trigger`` with SIGNAL sent in iteration ``signal_at``."""
    model, optimizer = manager.models["main"], manager.optimizers["main"]
    ran = []
    while not manager.stop_trigger:
        with manager.run_iteration():
            if manager.iteration + 1 == signal_at:
                os.kill(os.getpid(), SIGNAL)
            x, t = _batch(manager.iteration)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), t).backward()
            optimizer.step()
        ran.append(manager.iteration)
    return ran


# ---------------------------------------------------------------------- loop shapes

_LOOPS = """
import logging, os, signal, sys
import torch
import pytorch_pfn_extras.engine, pytorch_pfn_extras.runtime
from pytorch_pfn_extras.training import ExtensionsManager, IgniteExtensionsManager, extensions

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
STOP = 3  # the signal comes in iteration 3, in the middle of the first of 2 epochs of 5


def preempt():
    os.kill(os.getpid(), signal.SIGTERM)  # Slurm's, to every process of the job step
    os.kill(os.getpid(), signal.SIGTERM)  # and torchrun's copy


def say(shape, what):
    print(shape, what, flush=True)


def setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(5)]

    def step(x, t):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        optimizer.step()

    return model, optimizer, data, step


def trainer(out):
    _, _, data, _ = setup()

    class Regressor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.calls = torch.nn.Linear(3, 1), 0

        def forward(self, x, t):
            self.calls += 1
            say("trainer", f"iteration {self.calls}")
            if self.calls == STOP:
                preempt()
            return {"loss": torch.nn.functional.mse_loss(self.linear(x), t)}

    model = Regressor()
    pytorch_pfn_extras.runtime.to(model, "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = pytorch_pfn_extras.engine.create_trainer(
        model, optimizer, 2, out_dir=out, extensions=[extensions.PreemptionHandler()]
    )
    trainer.extend(extensions.snapshot(autoload=True), trigger=(100, "iteration"))
    trainer.run([{"x": x, "t": t} for x, t in data])


def ignite(out):
    from ignite.engine import Engine

    model, optimizer, data, step = setup()

    def ignite_step(engine, batch):
        say("ignite", f"iteration {engine.state.iteration}")
        if engine.state.iteration == STOP:
            preempt()
        step(*batch)

    engine = Engine(ignite_step)
    manager = IgniteExtensionsManager(engine, model, optimizer, 2, out_dir=out)
    manager.extend(extensions.snapshot(autoload=True), trigger=(100, "iteration"))
    manager.extend(extensions.PreemptionHandler())
    engine.run(data, max_epochs=2)


def nested(out):  # the canonical loop, unchanged
    model, optimizer, data, step = setup()
    manager = ExtensionsManager(model, optimizer, 2, iters_per_epoch=5, out_dir=out)
    manager.extend(extensions.snapshot(autoload=True), trigger=(100, "iteration"))
    manager.extend(extensions.PreemptionHandler())
    while not manager.stop_trigger:
        for x, t in data:
            with manager.run_iteration():
                say("nested", f"iteration {manager.iteration + 1}")
                if manager.iteration + 1 == STOP:
                    preempt()
                step(x, t)


for shape in sys.argv[2:]:  # one process, each loop in turn
    globals()[shape](os.path.join(sys.argv[1], shape))
    say(shape, "after the loop")
"""


def test_each_loop_shape_exits_0_after_a_preemption_signalled_twice(tmp_path: Path) -> None:
    # One process runs the trainer's loop, the Ignite manager's and the canonical nested
    # loop in turn (each preempted after the one before: its handler is installed over the
    # other's); the nested loop ends the process.
    shapes = ["trainer", "ignite", "nested"]
    if importlib.util.find_spec("ignite") is None:
        shapes.remove("ignite")  # pytorch-ignite is an extra
    script = tmp_path / "loops.py"
    script.write_text(_LOOPS)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), *shapes],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    context = f"{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, context
    lines = done.stdout.splitlines()
    for shape in shapes:
        # No training step beyond the stop iteration, one snapshot there.
        ran = [line for line in lines if line.startswith(f"{shape} iteration")]
        assert ran == [f"{shape} iteration {i}" for i in (1, 2, 3)], context
        assert os.listdir(tmp_path / shape) == ["snapshot_iter_3"], context
        # The nested loop asks for iteration 4: the process ends there, with exit code 0.
        assert (f"{shape} after the loop" in lines) is (shape != "nested"), context
    stopped = "preempted: SIGTERM was received by this process; training stops at iteration 3"
    assert done.stderr.count(f"{stopped} after 1 snapshot(s)") == len(shapes), context
    assert done.stderr.count("ignored 1 repeated signal(s)") == len(shapes), context
    assert done.stderr.count("exiting with SystemExit(0)") == 1, context


# ---------------------------------------------------------------------- the end of training


def _signal_after_the_check(at: int) -> Any:
    """An extension that runs after the handler's check of each iteration and sends SIGNAL
    in iteration ``at``: a signal that comes too late for the last check."""

    @make_extension(trigger=(1, "iteration"), priority=PRIORITY_SNAPSHOT - 10)
    def late_signal(manager: Any) -> None:
        if manager.iteration == at:
            os.kill(os.getpid(), SIGNAL)

    return late_signal


def _run_trainer(out: Path, *extensions: Any, snapshot: Any) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = model

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.linear(x), t)}

    regressor = Regressor()
    pytorch_pfn_extras.runtime.to(regressor, "cpu")
    optimizer = torch.optim.SGD(regressor.parameters(), lr=0.1)
    trainer = pytorch_pfn_extras.engine.create_trainer(
        regressor, optimizer, 2, out_dir=out, extensions=list(extensions)
    )
    trainer.extend(snapshot, trigger=(100, "iteration"))
    data = [{"x": x, "t": t} for x, t in (_batch(i) for i in range(ITERS_PER_EPOCH))]
    trainer.run(data)
    return trainer


@pytest.mark.parametrize("loop", ["manager", "trainer"])
def test_a_signal_after_the_last_check_is_saved_when_training_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, loop: str
) -> None:
    last = 2 * ITERS_PER_EPOCH
    handler = ext_module.PreemptionHandler()
    # The periodic snapshot does not run at the end: what is there, the preemption wrote.
    snapshot = ext_module.snapshot(autoload=True)
    extensions = [handler, _signal_after_the_check(last)]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        if loop == "manager":
            manager = _manager(tmp_path, *extensions)
            manager.extend(snapshot, trigger=(100, "iteration"))
            assert _train(manager) == list(range(1, last + 1))
        else:
            trainer = _run_trainer(tmp_path, *extensions, snapshot=snapshot)
            assert trainer.iteration == last
    assert handler.preempted and handler.stop_iteration == last and handler.received == SIGNAL
    assert os.listdir(tmp_path) == [f"snapshot_iter_{last}"]
    assert f"training stops at iteration {last} after 1 snapshot(s)" in caplog.text


def test_a_preemption_saves_snapshots_whose_condition_is_false_and_counts_what_it_wrote(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = torch.nn.Linear(1, 1)
    never = ext_module.snapshot(condition=lambda: False)  # its trigger fires at the stop
    quiet = ext_module.snapshot_object(model, "model_{.iteration}", condition=lambda: False)
    manager = _manager(tmp_path, ext_module.PreemptionHandler())
    manager.extend(never, trigger=(1, "iteration"))
    manager.extend(quiet, trigger=(100, "iteration"))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert _train(manager, signal_at=3) == [1, 2, 3]
    assert sorted(os.listdir(tmp_path)) == ["model_3", "snapshot_iter_3"]
    assert "training stops at iteration 3 after 2 snapshot(s)" in caplog.text


def test_a_preemption_sets_up_and_saves_a_snapshot_whose_trigger_had_finished(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def run(signal_at: int) -> None:
        model = torch.nn.Linear(1, 1)
        manager = _manager(tmp_path, ext_module.PreemptionHandler())
        manager.extend(ext_module.snapshot(autoload=True), trigger=(100, "iteration"))
        # Saved at the first iteration only: a resumed run does not initialize it. The
        # preemption sets it up (without autoloading) and saves it, then the next one.
        once = ext_module.snapshot_object(
            model, "once_{.iteration}", snapshot_mode=ext_module.SnapshotMode.SHARDED
        )
        manager.extend(once, trigger=triggers.OnceTrigger(), priority=PRIORITY_SNAPSHOT + 1)
        manager.extend(
            ext_module.snapshot_object(model, "model_{.iteration}"), trigger=(100, "iteration")
        )
        assert _train(manager, signal_at=signal_at)[-1] == signal_at

    run(2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run(4)  # resumed at 2
    assert sorted(os.listdir(tmp_path)) == [
        "model_2",
        "model_4",
        "once_1",
        "once_2",
        "once_4",
        "snapshot_iter_2",
        "snapshot_iter_4",
    ]
    assert "training stops at iteration 4 after 3 snapshot(s)" in caplog.text


# ---------------------------------------------------------------------- request_stop


def test_request_stop_ends_training_after_the_iteration_with_its_reason(tmp_path: Path) -> None:
    manager = _manager(tmp_path, epochs=3)

    @make_extension(trigger=(1, "iteration"))
    def stop_at_4(manager: Any) -> None:
        if manager.iteration == 4:
            manager.request_stop("the loss stopped improving")

    manager.extend(stop_at_4)
    ran = []
    with pytest.raises(RuntimeError, match=r"training has finished \(the loss stopped improving"):
        while not manager.stop_trigger:
            for _ in range(ITERS_PER_EPOCH):  # a loader of 5 batches
                with manager.run_iteration():  # a normal end: no SystemExit
                    ran.append(manager.iteration + 1)
    assert ran == [1, 2, 3, 4]
    assert manager.stop_trigger and manager.iteration == 4
    with pytest.raises(TypeError, match="request_stop\\(reason\\) must be a str saying why"):
        manager.request_stop(3)  # type: ignore[arg-type]


def test_request_stop_terminates_the_ignite_engine_after_the_iteration(tmp_path: Path) -> None:
    engine_module = pytest.importorskip("ignite.engine")
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager: IgniteExtensionsManager

    def step(engine: Any, batch: Any) -> None:
        if engine.state.iteration == 7:
            manager.request_stop("enough")  # in the process function, as engine.terminate()

    engine = engine_module.Engine(step)
    manager = IgniteExtensionsManager(engine, model, optimizer, 3, out_dir=tmp_path)
    finalized: list[int] = []
    manager.extend(
        make_extension(finalizer=lambda m: finalized.append(m.iteration))(lambda m: None)
    )
    engine.run([_batch(i) for i in range(ITERS_PER_EPOCH)], max_epochs=3)
    assert engine.state.iteration == 7 and manager.iteration == 7
    assert manager.stop_trigger and finalized == [7]
