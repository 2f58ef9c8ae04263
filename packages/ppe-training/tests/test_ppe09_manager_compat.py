"""PPE 0.9 code, snapshots and conventions around the manager, run unchanged.

Every test here is written as a PPE 0.9 user writes it. ``data/ppe09_manager`` holds snapshots
written by the published PPE 0.9.0 (see its README): a faithful implementation resumes from
them and ends where 0.9 ended.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.engine
import pytorch_pfn_extras.reporting
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
from pytorch_pfn_extras.training import ExtensionEntry, ExtensionsManager, extensions
from pytorch_pfn_extras.training import trigger as trigger_module
from pytorch_pfn_extras.writing import SimpleWriter

ppe = pytorch_pfn_extras
FIXTURE = Path(__file__).parent / "data" / "ppe09_manager"
PPE09_KEYS = {
    "_start_execution",
    "_start_iteration",
    "extensions",
    "models",
    "optimizers",
    "ppe_version",
    "state_objects",
}


# -- the 0.9 fixture: make_fixture.py's build() and train() ---------------------------------


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    x = torch.linspace(-1.0, 1.0, 32 * 4).reshape(32, 4)
    t = (torch.arange(32) * 7 % 3).long()
    return [(x[i : i + 8], t[i : i + 8]) for i in range(0, 32, 8)]


def _build(out_dir: Path, max_epochs: int) -> tuple[Any, Any, ExtensionsManager]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = ppe.training.ExtensionsManager(
        model,
        optimizer,
        max_epochs,
        iters_per_epoch=4,
        out_dir=str(out_dir),
        extensions=[extensions.LogReport(trigger=(1, "epoch"))],
    )
    manager.extend(extensions.snapshot(autoload=True), trigger=(1, "epoch"))
    return model, optimizer, manager


def _train(manager: ExtensionsManager, model: Any, optimizer: Any) -> int:
    """Train until the stop trigger; return the number of iterations run."""
    loader = _data()
    done = 0
    while not manager.stop_trigger:
        for x, t in loader:
            with manager.run_iteration():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), t)
                ppe.reporting.report({"train/loss": loss.item()})
                loss.backward()
                optimizer.step()
            done += 1
    return done


def _expected() -> dict[str, Any]:
    expected: dict[str, Any] = json.loads((FIXTURE / "expected.json").read_text())
    return expected


def _assert_final_weights(model: torch.nn.Module) -> None:
    final = _expected()["final_state_dict"]
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, torch.tensor(final[key]), atol=1e-6, rtol=0)


def test_resuming_a_ppe09_snapshot_ends_with_ppe09s_weights_and_log(tmp_path: Path) -> None:
    shutil.copy(FIXTURE / "snapshot_iter_4", tmp_path)
    model, optimizer, manager = _build(tmp_path, max_epochs=2)
    with pytest.warns(UserWarning, match=r"written by version 0\.9\.0 into version"):
        done = _train(manager, model, optimizer)
    assert done == 4  # the second epoch only
    _assert_final_weights(model)
    log = json.loads((tmp_path / "log").read_text())
    expected_log = _expected()["log"]
    assert [(e["epoch"], e["iteration"]) for e in log] == [(1, 4), (2, 8)]
    assert log[0] == expected_log[0]  # the first entry comes back from the 0.9 snapshot
    assert log[1]["train/loss"] == pytest.approx(expected_log[1]["train/loss"], abs=1e-6)


def test_autoload_takes_the_newest_ppe09_snapshot_and_has_nothing_left_to_do(
    tmp_path: Path,
) -> None:
    for name in ("snapshot_iter_4", "snapshot_iter_8"):
        shutil.copy(FIXTURE / name, tmp_path)
    model, optimizer, manager = _build(tmp_path, max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert _train(manager, model, optimizer) == 0
    _assert_final_weights(model)
    assert manager.iteration == 8


def test_the_optimizer_state_of_a_ppe09_snapshot_comes_back(tmp_path: Path) -> None:
    shutil.copy(FIXTURE / "snapshot_iter_4", tmp_path)
    model, optimizer, manager = _build(tmp_path, max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        manager.start_extensions()
    saved = torch.load(FIXTURE / "snapshot_iter_4", weights_only=True)
    for index, parameter in enumerate(model.parameters()):
        torch.testing.assert_close(
            optimizer.state[parameter]["momentum_buffer"],
            saved["optimizers"]["main"]["state"][index]["momentum_buffer"],
        )
    assert manager.iteration == 4


def test_our_snapshots_carry_ppe09s_top_level_keys(tmp_path: Path) -> None:
    model, optimizer, manager = _build(tmp_path, max_epochs=1)
    _train(manager, model, optimizer)
    ours = torch.load(tmp_path / "snapshot_iter_4", weights_only=True)
    assert set(ours) >= PPE09_KEYS
    assert set(ours) >= set(_expected()["snapshot_iter_4_top_level_keys"])
    assert ours["_start_iteration"] == 4
    # PPE's own version (the meta-package's), or ppe-training's where it is installed alone
    assert ours["ppe_version"] == getattr(ppe, "__version__", ppe.training.__version__)
    assert set(ours["extensions"]) == {"LogReport", "_Snapshot"}  # PPE's names


def test_a_snapshot_of_another_version_warns_once_naming_both_and_loads(tmp_path: Path) -> None:
    _, _, manager = _build(tmp_path, max_epochs=2)
    state = torch.load(FIXTURE / "snapshot_iter_4", weights_only=True)
    with pytest.warns(UserWarning) as record:
        manager.load_state_dict(state)
    messages = [str(w.message) for w in record if "version" in str(w.message)]
    assert len(messages) == 1
    ppe_version = getattr(ppe, "__version__", ppe.training.__version__)  # see above
    assert "0.9.0" in messages[0] and f"into version {ppe_version} " in messages[0]
    assert manager.iteration == 4


# -- the manager's public surface --------------------------------------------------------


def test_get_trigger_takes_a_list_from_a_config() -> None:
    trigger = trigger_module.get_trigger(json.loads('[1, "epoch"]'))
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=3)
    fired = []
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
        fired.append(trigger(manager))
    assert fired == [False, False, True, False, False, True]


def test_the_observation_can_be_assigned() -> None:
    seen: list[dict[str, Any]] = []

    def replace(manager: Any) -> None:
        manager.observation = {"replaced": 1.0}

    def read(manager: Any) -> None:
        seen.append(dict(manager.observation))

    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1)
    manager.extend(replace, priority=200)
    manager.extend(read, priority=100)
    with manager.run_iteration():
        ppe.reporting.report({"loss": 1.0})
    assert seen == [{"replaced": 1.0}]
    with pytest.raises(TypeError, match="must be a dict, got list"):
        manager.observation = []  # type: ignore[assignment]


def test_an_extension_reading_models_must_declare_needs_model_state() -> None:
    model = torch.nn.Linear(2, 2)
    read: list[int] = []

    def undeclared(manager: Any) -> None:
        read.append(len(manager.models))

    manager = ExtensionsManager(model, {}, 1, iters_per_epoch=2)
    manager.extend(undeclared, trigger=(1, "iteration"))
    with (
        pytest.raises(RuntimeError, match="set `needs_model_state = True`"),
        manager.run_iteration(),
    ):
        pass
    assert read == []

    @ppe.training.make_extension(trigger=(1, "iteration"), needs_model_state=True)
    def declared(manager: Any) -> None:
        read.append(len(manager.models))

    manager = ExtensionsManager(model, {}, 1, iters_per_epoch=2)
    manager.extend(declared)
    manager.extend(undeclared)  # the state is held in these iterations: it may read too
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
    assert read == [1, 1, 1, 1]
    assert manager.models == {"main": model}  # outside the extensions: always


def test_make_extension_without_hooks_has_callable_no_op_hooks() -> None:
    @ppe.training.make_extension(trigger=(1, "epoch"))
    def extension(manager: Any) -> None:
        pass

    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1)
    assert extension.initialize(manager) is None  # type: ignore[attr-defined]
    assert extension.finalize(manager) is None  # type: ignore[attr-defined]
    assert extension.on_error(manager, RuntimeError("x"), None) is None  # type: ignore[attr-defined]


def test_extend_accepts_an_extension_entry() -> None:
    calls: list[int] = []

    def count(manager: Any) -> None:
        calls.append(manager.iteration)

    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=2)
    manager.extend(ExtensionEntry(count, trigger=(2, "iteration"), name="counter"))
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass
    assert calls == [2, 4]
    assert manager.get_extension("counter") is count


def test_ignite_manager_takes_enable_trace_and_state_objects() -> None:
    ignite = pytest.importorskip("ignite.engine")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    engine = ignite.Engine(lambda engine, batch: None)
    manager = ppe.training.IgniteExtensionsManager(
        engine,
        model,
        optimizer,
        1,
        enable_trace=True,
        state_objects={"scheduler": scheduler},
    )
    engine.run([0, 1], max_epochs=1)
    state = manager.state_dict()
    assert state["state_objects"]["scheduler"] == scheduler.state_dict()


# -- duck-typed optimizers -----------------------------------------------------------------


class WrappedOptimizer:
    """An optimizer wrapper from another library: not a torch.optim.Optimizer subclass."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.inner = optimizer
        self.steps = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        self.steps += 1
        return self.inner.step(closure)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.inner.load_state_dict(state_dict["inner"])
        self.steps = int(state_dict["steps"])


def test_a_duck_typed_optimizer_is_saved_and_loaded_by_the_manager(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = WrappedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    while not manager.stop_trigger:
        with manager.run_iteration():
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
    state = manager.state_dict()
    assert state["optimizers"]["main"]["steps"] == 2
    other = WrappedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    resumed = ExtensionsManager(model, other, 2, iters_per_epoch=2, out_dir=str(tmp_path))
    resumed.load_state_dict(state)
    assert other.steps == 2


def test_the_trainer_steps_a_duck_typed_optimizer(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = WrappedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = model

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": self.linear(x).pow(2).mean()}

    net = Net()
    ppe.runtime.to(net, "cpu")
    trainer = ppe.engine.create_trainer(net, optimizer, 1, out_dir=str(tmp_path))
    trainer.run([torch.ones(4, 2)] * 3)
    assert optimizer.steps == 3


def test_an_object_missing_an_optimizer_method_is_named(tmp_path: Path) -> None:
    class NoLoad:
        def state_dict(self) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match=r"optimizers\['main'\] \(NoLoad\).*load_state_dict\(\)"):
        ExtensionsManager({}, {"main": NoLoad()}, 1, iters_per_epoch=1)

    class NoStep(NoLoad):
        def load_state_dict(self, state: Any) -> None:
            pass

    model = torch.nn.Linear(2, 1)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = model

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": self.linear(x).sum()}

    net = Net()
    ppe.runtime.to(net, "cpu")
    trainer = ppe.engine.create_trainer(net, NoStep(), 1, out_dir=str(tmp_path))
    with pytest.raises(TypeError, match=r"optimizer 'main' \(NoStep\).*zero_grad\(\), step\(\)"):
        trainer.run([torch.ones(1, 2)])


# -- snapshots -----------------------------------------------------------------------------


def _loop(manager: ExtensionsManager) -> None:
    while not manager.stop_trigger:
        with manager.run_iteration():
            pass


def test_snapshot_writes_into_its_writers_own_out_dir(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path / "out"))
    manager.extend(extensions.snapshot(writer=SimpleWriter(out_dir=str(elsewhere))))
    _loop(manager)
    assert (elsewhere / "snapshot_iter_2").exists()
    assert not (tmp_path / "out" / "snapshot_iter_2").exists()


def test_snapshot_object_saves_and_autoloads_a_dict_of_state_objects(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    manager.extend(
        extensions.snapshot_object({"model": model, "opt": optimizer}, "objects_{.iteration}")
    )
    _loop(manager)
    saved = torch.load(tmp_path / "objects_2", weights_only=True)
    assert set(saved) == {"model", "opt"}

    other_model = torch.nn.Linear(2, 2)
    other_optimizer = torch.optim.SGD(other_model.parameters(), lr=0.1)
    snap = extensions.snapshot_object(
        {"model": other_model, "opt": other_optimizer}, "objects_{.iteration}", autoload=True
    )
    second = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    assert snap.initialize(second) == "objects_2"
    torch.testing.assert_close(other_model.weight, model.weight)
    assert other_optimizer.param_groups[0]["lr"] == 0.5


def test_snapshot_initialize_returns_the_file_it_loaded(tmp_path: Path) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    fresh = extensions.snapshot(autoload=True)
    assert fresh.initialize(manager) is None
    manager.extend(extensions.snapshot())
    _loop(manager)
    resumed = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(tmp_path))
    snap = extensions.snapshot(autoload=True)
    resumed.extend(snap)
    assert snap.initialize(resumed) == "snapshot_iter_2"


def test_snapshot_with_both_savefun_and_writer_raises_type_error() -> None:
    with pytest.raises(TypeError, match="either savefun or writer"):
        extensions.snapshot(savefun=torch.save, writer=SimpleWriter())
    with pytest.raises(TypeError, match="either savefun or writer"):
        extensions.snapshot_object({}, "x", torch.save, writer=SimpleWriter())


def test_snapshot_mode_default_is_accepted() -> None:
    extension = extensions.snapshot(snapshot_mode=extensions.SnapshotMode.DEFAULT)
    assert extension.default_name == "_Snapshot"
    with pytest.raises(TypeError, match="snapshot_mode must be a SnapshotMode, got 'sharded'"):
        extensions.snapshot(snapshot_mode="sharded")  # type: ignore[arg-type]
