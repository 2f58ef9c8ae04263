"""Collective snapshots (SnapshotMode.SHARDED / DISTRIBUTED) in one process.

The multi-process behaviour (FSDP2, DDP, other world sizes, killed ranks) is in
test_sharded_snapshot_dist.py; here the same extension runs without a process group.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.training.convert_snapshot import main as convert
from pytorch_pfn_extras.training.convert_snapshot import sharded_to_file
from pytorch_pfn_extras.writing import temporary_name

SHARDED = ext_module.SnapshotMode.SHARDED
DISTRIBUTED = ext_module.SnapshotMode.DISTRIBUTED


def _build(
    out: Path,
    *,
    model: torch.nn.Module | None = None,
    snapshot: Any = None,
    trigger: Any = (2, "iteration"),
    state_objects: dict[str, Any] | None = None,
) -> tuple[ExtensionsManager, torch.nn.Module]:
    torch.manual_seed(0)
    if model is None:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    objects = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 3, gamma=0.5)}
    manager = ExtensionsManager(
        model,
        optimizer,
        3,
        iters_per_epoch=4,
        out_dir=out,
        state_objects={**objects, **(state_objects or {})},
    )
    manager.extend(ext_module.LogReport(trigger=(1, "iteration")))
    if snapshot is None:
        snapshot = ext_module.snapshot(snapshot_mode=SHARDED, autoload=True)
    manager.extend(snapshot, trigger=trigger)
    return manager, model


def _train(manager: ExtensionsManager, model: torch.nn.Module, n: int | None = None) -> int:
    done = 0
    optimizer = manager.optimizers["main"]
    scheduler = manager.state_objects["scheduler"]
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            x = torch.arange(6.0).reshape(2, 3) / 6 + manager.iteration
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            reporting.report({"loss": loss.item()})
        done += 1
    return done


def _finished_reference(out: Path) -> tuple[ExtensionsManager, torch.nn.Module]:
    manager, model = _build(out, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    _train(manager, model)
    return manager, model


def _names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_sharded_snapshot_is_a_committed_directory_and_resumes_to_the_same_weights(
    tmp_path: Path,
) -> None:
    reference, reference_model = _finished_reference(tmp_path / "reference")
    manager, model = _build(tmp_path / "run")
    assert _train(manager, model, 7) == 7
    assert _names(tmp_path / "run") == [
        "log",
        "snapshot_iter_2",
        "snapshot_iter_4",
        "snapshot_iter_6",
    ]
    directory = tmp_path / "run" / "snapshot_iter_6"
    assert _names(directory) == [".metadata", "__0_0.distcp", "ppe_snapshot.json"]
    manifest = json.loads((directory / "ppe_snapshot.json").read_text())
    assert manifest["mode"] == "SHARDED"
    assert manifest["world_size"] == 1
    assert manifest["iteration"] == 6

    resumed, resumed_model = _build(tmp_path / "run")
    assert _train(resumed, resumed_model) == 6
    assert resumed.get_extension("_Snapshot").resumed_from == str(directory)
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value)
    assert resumed.optimizers["main"].param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**4)
    log = resumed.get_extension("LogReport").log
    assert [entry["iteration"] for entry in log] == list(range(1, 13))
    expected = [entry["loss"] for entry in reference.get_extension("LogReport").log]
    assert [entry["loss"] for entry in log] == pytest.approx(expected)


def test_n_retains_removes_old_directories_only_after_the_commit(tmp_path: Path) -> None:
    snap = ext_module.snapshot(snapshot_mode=SHARDED, n_retains=2)
    manager, model = _build(tmp_path, snapshot=snap)
    _train(manager, model)
    assert [n for n in _names(tmp_path) if n.startswith("snapshot")] == [
        "snapshot_iter_10",
        "snapshot_iter_12",
    ]


def _temporary_of_a_gone_process(base: str) -> str:
    # ppe-core's temporary name (.{base}.tmp-{host}-{pid}-{random}) with the pid of a
    # process of this host that has exited: what a killed job leaves.
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    prefix, _pid, random_part = temporary_name(base).rsplit("-", 2)
    return f"{prefix}-{process.pid}-{random_part}"


def test_autoload_ignores_and_removes_uncommitted_temporaries(tmp_path: Path) -> None:
    manager, model = _build(tmp_path)
    _train(manager, model, 4)
    # A snapshot whose ranks did not all finish: never renamed, so never loaded.
    partial = tmp_path / _temporary_of_a_gone_process("snapshot_iter_6")
    shutil.copytree(tmp_path / "snapshot_iter_4", partial)
    (partial / "ppe_snapshot.json").unlink()
    live = tmp_path / temporary_name("snapshot_iter_8")  # this process's: still writing
    live.mkdir()
    (tmp_path / ".other.tmp-1").mkdir()  # not a snapshot's: left alone
    resumed, _resumed_model = _build(tmp_path)
    resumed.start_extensions()
    assert resumed.iteration == 4
    assert not partial.exists()
    assert live.exists()
    assert (tmp_path / ".other.tmp-1").exists()


def test_missing_shard_is_an_error_naming_the_file_and_its_rank(tmp_path: Path) -> None:
    manager, model = _build(tmp_path)
    _train(manager, model, 4)
    (tmp_path / "snapshot_iter_4" / "__0_0.distcp").unlink()
    resumed, _ = _build(tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=r"snapshot_iter_4' is incomplete: __0_0\.distcp \(written by rank 0\) is missing; "
        r"it holds .*models\.main\.0\.bias",
    ):
        resumed.start_extensions()


def test_a_truncated_shard_is_an_error_and_a_missing_manifest_is_skipped(tmp_path: Path) -> None:
    manager, model = _build(tmp_path)
    _train(manager, model, 4)
    shard = tmp_path / "snapshot_iter_4" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    # Committed (its manifest is there): never passed over in silence.
    with pytest.raises(FileNotFoundError, match=r"__0_0\.distcp .* is truncated \(100 of"):
        _build(tmp_path)[0].start_extensions()
    # Without its manifest it never committed: skipped, left as it is, the previous one loads.
    (tmp_path / "snapshot_iter_4" / "ppe_snapshot.json").unlink()
    resumed = _build(tmp_path)[0]
    with pytest.warns(
        UserWarning,
        match=r"snapshot_iter_4' is a sharded snapshot without its ppe_snapshot\.json \(its "
        r"ranks' files only: it never committed, or lost its manifest\); loading the previous",
    ):
        resumed.start_extensions()
    assert resumed.iteration == 2
    assert (tmp_path / "snapshot_iter_4" / "__0_0.distcp").stat().st_size == 100


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (
            torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)),
            r"model 'main': shapes differ: 0\.bias: \(4,\) in the snapshot, \(5,\) in the model",
        ),
        (
            torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh()),
            r"model 'main': not in the model: \['2\.bias', '2\.weight'\]",
        ),
        (
            torch.nn.Sequential(
                torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2), torch.nn.Linear(2, 2)
            ),
            r"model 'main': missing from the snapshot: \['3\.bias', '3\.weight'\]",
        ),
    ],
)
def test_incompatible_model_is_an_error_naming_what_differs(
    tmp_path: Path, model: torch.nn.Module, match: str
) -> None:
    manager, trained = _build(tmp_path)
    _train(manager, trained, 2)
    resumed, _ = _build(tmp_path, model=model)
    with pytest.raises(ValueError, match=match):
        resumed.start_extensions()


def test_async_save_lets_training_go_on_while_the_shards_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    release = threading.Event()
    in_flight: list[int] = []
    most = [0]
    original = FileSystemWriter.write_data

    def write_data(self: Any, plan: Any, planner: Any) -> Any:
        in_flight.append(1)
        most[0] = max(most[0], len(in_flight))
        assert release.wait(30)
        try:
            return original(self, plan, planner)
        finally:
            in_flight.pop()

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap)
    _train(manager, model, 3)  # the write of snapshot_iter_2 is held back
    assert manager.iteration == 3
    assert next(n for n in _names(tmp_path) if "snapshot" in n).startswith(".snapshot_iter_2.tmp-")
    release.set()
    _train(manager, model)  # every later save waits for the one before
    assert most[0] == 1
    assert [n for n in _names(tmp_path) if "snapshot" in n] == [
        f"snapshot_iter_{i}" for i in (10, 12, 2, 4, 6, 8)
    ]
    _reference, reference_model = _finished_reference(tmp_path / "reference")
    resumed, resumed_model = _build(tmp_path)
    resumed.start_extensions()
    assert resumed.iteration == 12
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value)


def _slow_deferred_copy(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    # The optimizer state's copy, which async_save makes after the call returns, held back
    # long enough for the training loop to reach the next optimizer step before it is done.
    from pytorch_pfn_extras.training._snapshots import _staging

    original = _staging._copy_checked

    def copy_checked(*args: Any) -> None:
        time.sleep(0.2)
        try:
            original(*args)
        finally:
            events.append("copied")

    monkeypatch.setattr(_staging, "_copy_checked", copy_checked)


def _optimizer_state(state: dict[str, Any]) -> dict[int, dict[str, torch.Tensor]]:
    return {int(k): dict(v) for k, v in state.items()}


def test_async_save_holds_the_optimizer_state_of_its_iteration_while_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    _slow_deferred_copy(monkeypatch, events)
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True, autoload=True)
    manager, model = _build(tmp_path, snapshot=snap)
    optimizer = manager.optimizers["main"]
    optimizer.register_step_post_hook(lambda *_: events.append("step"))
    expected = {}
    while not manager.stop_trigger:
        _train(manager, model, 1)
        if manager.iteration % 2 == 0:  # saved at the end of this iteration
            expected[manager.iteration] = copy.deepcopy(optimizer.state_dict()["state"])
    # Every save (2 to 12; the first one's copy was allocated after the first step) copies
    # the optimizer state in the background, and the next step() waits for it.
    assert events == (["step"] * 2 + ["copied"]) * 6
    for iteration in (2, 4, 8, 12):
        state = sharded_to_file(
            str(tmp_path / f"snapshot_iter_{iteration}"), str(tmp_path / "file.pt")
        )
        saved = _optimizer_state(state["optimizers"]["main"]["state"])
        for index, values in _optimizer_state(expected[iteration]).items():
            for key, value in values.items():
                torch.testing.assert_close(saved[index][key], value, rtol=0, atol=0)
    _, reference_model = _finished_reference(tmp_path / "reference")
    resumed, resumed_model = _build(tmp_path / "resume")
    shutil.copytree(tmp_path / "snapshot_iter_8", tmp_path / "resume" / "snapshot_iter_8")
    _train(resumed, resumed_model)
    assert resumed.get_extension("_Snapshot").resumed_from.endswith("snapshot_iter_8")
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value)


def test_async_save_allocates_its_copy_in_the_background_after_the_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.checkpoint.staging import DefaultStager

    allocated: list[tuple[str, int]] = []  # (thread, iteration) of each full copy
    original = DefaultStager.stage

    def stage(self: Any, state_dict: Any, **kwargs: Any) -> Any:
        allocated.append((threading.current_thread().name, manager.iteration))
        return original(self, state_dict, **kwargs)

    monkeypatch.setattr(DefaultStager, "stage", stage)
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap, trigger=(4, "iteration"))
    _train(manager, model)
    # Once, by the stager's thread after the first optimizer step, not by
    # the save of iteration 4 in the training loop's thread; every save reuses it.
    assert len(allocated) == 1
    thread, iteration = allocated[0]
    assert thread.startswith("ppe-snapshot-copy") and iteration < 4
    assert _names(tmp_path)[-3:] == ["snapshot_iter_12", "snapshot_iter_4", "snapshot_iter_8"]
    resumed, resumed_model = _build(tmp_path / "resumed")
    shutil.copytree(tmp_path / "snapshot_iter_4", tmp_path / "resumed" / "snapshot_iter_4")
    resumed.start_extensions()
    reference, reference_model = _build(tmp_path / "reference", snapshot=ext_module.snapshot())
    _train(reference, reference_model, 4)
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value, rtol=0, atol=0)


def test_async_save_refuses_to_commit_an_optimizer_state_changed_during_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow_deferred_copy(monkeypatch, [])
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap)
    optimizer = manager.optimizers["main"]
    _train(manager, model, 4)  # saved at 2 (allocating the copy) and at 4 (copying later)
    first = next(iter(optimizer.state.values()))
    with torch.no_grad():
        first["exp_avg"].mul_(2)  # outside step(), while the copy of iteration 4 waits
    with pytest.raises(
        RuntimeError,
        match=r"asynchronous snapshot 'snapshot_iter_4' failed: rank 0: RuntimeError: the "
        r"optimizer state optimizers\.main\.state\.0\.exp_avg changed while the "
        r"asynchronous snapshot copied it .* not committed",
    ):
        _train(manager, model, 2)  # the save at 6 raises the failure of 4
    names = [n for n in _names(tmp_path) if "snapshot" in n]
    assert "snapshot_iter_2" in names
    assert "snapshot_iter_4" not in names


def test_async_save_copies_everything_before_returning_without_step_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An optimizer that cannot wait for a copy in a step pre-hook gets none deferred.
    events: list[str] = []
    _slow_deferred_copy(monkeypatch, events)
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap)
    optimizer = manager.optimizers["main"]
    optimizer.register_step_pre_hook = None  # type: ignore[method-assign,assignment]
    _train(manager, model, 4)
    expected = copy.deepcopy(optimizer.state_dict()["state"])
    with torch.no_grad():
        next(iter(optimizer.state.values()))["exp_avg"].mul_(2)  # after the save returned
    _train(manager, model, 2)
    snap.finalize(manager)
    assert events == []
    state = sharded_to_file(str(tmp_path / "snapshot_iter_4"), str(tmp_path / "file.pt"))
    saved = _optimizer_state(state["optimizers"]["main"]["state"])
    for index, values in _optimizer_state(expected).items():
        for key, value in values.items():
            torch.testing.assert_close(saved[index][key], value, rtol=0, atol=0)


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Every shard write of torch.distributed.checkpoint fails with ``OSError("disk full
    (injected)")`` until the function returned is called."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    original = FileSystemWriter.write_data

    def write_data(self: Any, plan: Any, planner: Any) -> Any:
        message = "disk full (injected)"
        raise OSError(message)

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    return lambda: monkeypatch.setattr(FileSystemWriter, "write_data", original)


def test_failed_write_is_an_error_and_leaves_nothing(
    tmp_path: Path, full_disk: Callable[[], None]
) -> None:
    manager, model = _build(tmp_path)
    with pytest.raises(
        RuntimeError,
        match=r"writing the sharded snapshot .*snapshot_iter_2\.tmp-.* failed: "
        r"rank 0: OSError: disk full \(injected\)",
    ):
        _train(manager, model)
    assert not [n for n in _names(tmp_path) if "snapshot" in n]  # its temporary removed
    full_disk()  # space again
    resumed, _resumed_model = _build(tmp_path)
    resumed.start_extensions()  # nothing to resume from
    assert resumed.iteration == 0


def test_async_save_failure_surfaces_at_the_next_save(
    tmp_path: Path, full_disk: Callable[[], None]
) -> None:
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap)
    _train(manager, model, 3)
    with pytest.raises(
        RuntimeError,
        match=r"asynchronous snapshot 'snapshot_iter_2' failed: rank 0: OSError: disk full",
    ):
        _train(manager, model, 1)  # iteration 4 saves again: the failure of 2 is raised
    assert not [n for n in _names(tmp_path) if "snapshot_iter" in n]  # nor a temporary


def test_async_save_failure_surfaces_at_finalize(
    tmp_path: Path, full_disk: Callable[[], None]
) -> None:
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap, trigger=(12, "iteration"))
    with pytest.raises(RuntimeError, match=r"asynchronous snapshot 'snapshot_iter_12' failed"):
        _train(manager, model)  # the stop trigger finalizes, which waits for the save


def _ppe01_distributed_directory(path: Path, states: list[dict[str, Any]]) -> None:
    # What ppe-training 0.1 wrote in SnapshotMode.DISTRIBUTED: each rank's state_dict() as
    # rank_<r>.pt and the manifest, in one directory.
    path.mkdir()
    for rank, state in enumerate(states):
        torch.save(state, path / f"rank_{rank}.pt")
    manifest = {
        "format": "pytorch-pfn-extras collective snapshot",
        "mode": "DISTRIBUTED",
        "world_size": len(states),
        "content": "manager",
        "iteration": int(states[0]["_start_iteration"]),
        "ppe_version": "0.1.0",
    }
    (path / "ppe_snapshot.json").write_text(json.dumps(manifest))


def test_distributed_mode_writes_one_default_file_and_resumes(tmp_path: Path) -> None:
    snap = ext_module.snapshot(snapshot_mode=DISTRIBUTED, autoload=True)
    manager, model = _build(tmp_path, snapshot=snap)
    _train(manager, model, 5)
    assert (tmp_path / "snapshot_iter_4").is_file()  # PPE 0.9's DISTRIBUTED: the DEFAULT file
    state = torch.load(tmp_path / "snapshot_iter_4", weights_only=True)
    assert state["_start_iteration"] == 4
    resumed, resumed_model = _build(
        tmp_path, snapshot=ext_module.snapshot(snapshot_mode=DISTRIBUTED, autoload=True)
    )
    resumed.start_extensions()
    assert resumed.iteration == 4
    torch.testing.assert_close(resumed_model[0].weight, state["models"]["main"]["0.weight"])
    # A SHARDED snapshot extension does not take a snapshot file for its own.
    sharded, _ = _build(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"snapshot_iter_4' is a file \(a DEFAULT or"):
        sharded.start_extensions()


def test_distributed_mode_still_loads_the_directories_of_ppe_training_0_1(tmp_path: Path) -> None:
    manager, model = _build(tmp_path / "source", snapshot=ext_module.snapshot())
    _train(manager, model, 4)
    state = torch.load(tmp_path / "source" / "snapshot_iter_4", weights_only=True)
    _ppe01_distributed_directory(tmp_path / "snapshot_iter_4", [state])
    resumed, resumed_model = _build(
        tmp_path, snapshot=ext_module.snapshot(snapshot_mode=DISTRIBUTED, autoload=True)
    )
    resumed.start_extensions()
    assert resumed.iteration == 4
    torch.testing.assert_close(resumed_model[0].weight, model[0].weight)
    # Written by two ranks: each rank's own state, which one process cannot take over.
    _ppe01_distributed_directory(tmp_path / "snapshot_iter_6", [state, state])
    other, _ = _build(
        tmp_path, snapshot=ext_module.snapshot(snapshot_mode=DISTRIBUTED, autoload=True)
    )
    with pytest.raises(ValueError, match=r"snapshot_iter_6' .* resumes only on 2 ranks, not 1"):
        other.start_extensions()


def test_snapshot_object_in_sharded_mode_saves_the_target(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    manager, _ = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    manager.extend(
        ext_module.snapshot_object(model, "model_{.iteration}", snapshot_mode=SHARDED),
        trigger=(2, "iteration"),
    )
    _train(manager, manager.models["main"], 2)
    other = torch.nn.Linear(3, 2)
    loader, _ = _build(tmp_path / "other", snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    loader.extend(
        ext_module.snapshot_object(
            other, str(tmp_path / "model_{.iteration}"), snapshot_mode=SHARDED, autoload=True
        )
    )
    loader.start_extensions()
    torch.testing.assert_close(other.weight, model.weight)
    # The manager's snapshot extension refuses the object's directory, and the other way.
    with pytest.raises(ValueError, match=r"holds a target's state in SnapshotMode\.SHARDED"):
        _build(
            tmp_path,
            snapshot=ext_module.snapshot(
                filename="model_{.iteration}", snapshot_mode=SHARDED, autoload=True
            ),
        )[0].start_extensions()


class _Holder:
    """A state of containers DCP saves as they are: a torch.Size, a list mixing tensors."""

    def __init__(self) -> None:
        self.values = [torch.zeros(3), 1.5, torch.ones(2, 2)]

    def state_dict(self) -> dict[str, Any]:
        return {"shape": torch.Size([2, 3]), "values": self.values}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = state["values"]


def test_async_snapshot_object_saves_each_state_as_it_was_when_called(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    holder = _Holder()
    target = {"model": model, "holder": holder}
    manager, _ = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    snap = ext_module.snapshot_object(
        target, "object_{.iteration}", snapshot_mode=SHARDED, async_save=True
    )
    manager.extend(snap, trigger=(2, "iteration"))
    expected = {}
    for _ in range(6):
        _train(manager, manager.models["main"], 1)
        if manager.iteration % 2 == 0:  # saved: change everything in place at once
            expected[manager.iteration] = copy.deepcopy(
                {"model": model.state_dict(), "holder": holder.state_dict()}
            )
            with torch.no_grad():
                for tensor in [*model.state_dict().values(), holder.values[0]]:
                    tensor.add_(1)
    snap.finalize(manager)  # the last write
    for iteration, state in expected.items():
        dcp_to_torch_save(str(tmp_path / f"object_{iteration}"), str(tmp_path / "object.pt"))
        saved = torch.load(tmp_path / "object.pt", weights_only=False)["target"]
        assert saved["holder"]["shape"] == torch.Size([2, 3])
        assert type(saved["holder"]["shape"]) is torch.Size
        assert saved["holder"]["values"][1] == 1.5
        torch.testing.assert_close(saved["holder"]["values"][0], state["holder"]["values"][0])
        for name, value in state["model"].items():
            torch.testing.assert_close(saved["model"][name], value, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"async_save": True}, ValueError, r"async_save=True needs snapshot_mode=SnapshotMode"),
        (
            {"async_save": True, "snapshot_mode": DISTRIBUTED},
            ValueError,
            "async_save=True needs",
        ),
        ({"async_save": 1, "snapshot_mode": SHARDED}, TypeError, "async_save must be a bool"),
        (
            {"snapshot_mode": SHARDED, "savefun": torch.save},
            TypeError,
            "not through a savefun; savefun applies to SnapshotMode.DEFAULT and DISTRIBUTED",
        ),
        (
            {"snapshot_mode": SHARDED, "snapshot_on_error": True},
            ValueError,
            r"snapshot_on_error=True needs SnapshotMode\.DEFAULT",
        ),
        (
            {"snapshot_mode": SHARDED, "n_retains": 0},
            ValueError,
            "n_retains must be a positive integer",
        ),
        (
            {"snapshot_mode": DISTRIBUTED, "autoload": True, "filename": lambda m: "x"},
            ValueError,
            "need a str filename",
        ),
        ({"snapshot_mode": "SHARDED"}, TypeError, "snapshot_mode must be a SnapshotMode"),
    ],
)
def test_collective_modes_reject_bad_arguments(
    kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ext_module.snapshot(**kwargs)


def test_saver_rank_outside_the_world_is_an_error(tmp_path: Path) -> None:
    manager, _ = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED, saver_rank=1))
    with pytest.raises(
        ValueError, match=r"saver_rank=1 is not a rank of the process group of size 1"
    ):
        manager.start_extensions()


# ---------------------------------------------------------------------------- converter


def test_converter_turns_a_sharded_snapshot_into_a_file_that_resumes_in_default_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, reference_model = _finished_reference(tmp_path / "reference")
    manager, model = _build(tmp_path / "sharded")
    _train(manager, model, 6)
    file = tmp_path / "default" / "snapshot_iter_6"
    file.parent.mkdir()
    assert convert([str(tmp_path / "sharded" / "snapshot_iter_6"), str(file)]) == 0
    assert "manager's state at iteration 6 (models ['main']" in capsys.readouterr().out
    state = torch.load(file, weights_only=True)
    assert state["_start_iteration"] == 6
    torch.testing.assert_close(state["models"]["main"]["2.weight"], model[2].weight)
    assert set(state["optimizers"]["main"]["state"]) == {0, 1, 2, 3}
    assert state["state_objects"]["scheduler"]["last_epoch"] == 6

    resumed, resumed_model = _build(
        tmp_path / "default", snapshot=ext_module.snapshot(autoload=True)
    )
    _train(resumed, resumed_model)
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value)


def test_converter_turns_a_file_into_a_sharded_snapshot_that_resumes(tmp_path: Path) -> None:
    _, reference_model = _finished_reference(tmp_path / "reference")
    manager, model = _build(tmp_path / "default", snapshot=ext_module.snapshot())
    _train(manager, model, 8)
    target = tmp_path / "sharded" / "snapshot_iter_8"
    assert convert([str(tmp_path / "default" / "snapshot_iter_8"), str(target)]) == 0
    assert json.loads((target / "ppe_snapshot.json").read_text())["iteration"] == 8
    resumed, resumed_model = _build(tmp_path / "sharded")
    _train(resumed, resumed_model)
    assert resumed.get_extension("_Snapshot").resumed_from == str(target)
    for name, value in reference_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value)


def test_converter_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert convert([str(tmp_path / "nothing"), str(tmp_path / "out")]) == 1
    assert "nothing' does not exist" in capsys.readouterr().err
    manager, model = _build(tmp_path / "source", snapshot=ext_module.snapshot())
    _train(manager, model, 2)
    state = torch.load(tmp_path / "source" / "snapshot_iter_2", weights_only=True)
    _ppe01_distributed_directory(tmp_path / "snapshot_iter_2", [state])
    assert convert([str(tmp_path / "snapshot_iter_2"), str(tmp_path / "x.pt")]) == 1
    assert "is a DISTRIBUTED snapshot, not a SHARDED one" in capsys.readouterr().err
    (tmp_path / "unknown").mkdir()
    assert convert([str(tmp_path / "unknown"), str(tmp_path / "y.pt")]) == 1
    assert "unknown' is a directory that is not a complete snapshot" in capsys.readouterr().err
    (tmp_path / "file.pt").write_bytes(b"")
    torch.save({"a": torch.ones(1)}, tmp_path / "file.pt")
    assert convert([str(tmp_path / "file.pt"), str(tmp_path / "snapshot_iter_2")]) == 1
    assert "snapshot_iter_2' exists" in capsys.readouterr().err


def test_converter_command_line_help() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "pytorch_pfn_extras.training.convert_snapshot", "-h"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr
    assert "SOURCE DESTINATION" in process.stdout
    assert "sharded snapshot directory" in process.stdout


def test_importing_training_does_not_import_torch_distributed_checkpoint() -> None:
    code = (
        "import sys; import pytorch_pfn_extras.training as t; "
        "t.extensions.snapshot(); t.extensions.snapshot(snapshot_mode=t.extensions.SnapshotMode.SHARDED); "
        "print('torch.distributed.checkpoint' in sys.modules)"
    )
    process = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert process.stdout.strip() == "False", process.stderr


@pytest.mark.parametrize("mode", [SHARDED, DISTRIBUTED, ext_module.SnapshotMode.DEFAULT])
def test_a_name_taken_by_what_a_snapshot_cannot_read_is_an_error_and_it_stays(
    tmp_path: Path, mode: Any
) -> None:
    # The user's own directory where the snapshot of iteration 2 goes.
    (tmp_path / "snapshot_iter_2").mkdir()
    (tmp_path / "snapshot_iter_2" / "notes.txt").write_text("mine")
    manager, model = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=mode))
    with pytest.raises(
        FileExistsError,
        match=r"snapshot_iter_2' is a directory that is not a complete snapshot .*a snapshot "
        r"never replaces .*move it away, or choose another filename",
    ):
        _train(manager, model, 2)
    assert _names(tmp_path / "snapshot_iter_2") == ["notes.txt"]
    assert not [n for n in _names(tmp_path) if ".tmp-" in n]


def test_a_sharded_snapshot_never_replaces_a_file_of_its_name(tmp_path: Path) -> None:
    (tmp_path / "snapshot_iter_2").write_bytes(b"not ours")
    manager, model = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    with pytest.raises(FileExistsError, match=r"snapshot_iter_2' is a file \(a DEFAULT or"):
        _train(manager, model, 2)
    assert (tmp_path / "snapshot_iter_2").read_bytes() == b"not ours"


def test_a_sharded_snapshot_rewritten_after_a_resume_replaces_its_own(tmp_path: Path) -> None:
    manager, model = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    _train(manager, model, 2)
    (tmp_path / "snapshot_iter_2" / "__0_0.distcp").write_bytes(b"")  # damaged since
    again, again_model = _build(tmp_path, snapshot=ext_module.snapshot(snapshot_mode=SHARDED))
    _train(again, again_model, 2)  # no autoload: iteration 2 is written again
    assert (tmp_path / "snapshot_iter_2" / "__0_0.distcp").stat().st_size > 0
    assert not [n for n in _names(tmp_path) if ".tmp-" in n]


def test_finalize_frees_what_async_saves_left_while_torch_distributed_is_up(
    tmp_path: Path,
) -> None:
    # DCP's asynchronous save leaves cycles holding its executor (a thread pool) and the
    # stager's copy; finalize collects them, rather than the interpreter at its exit.
    leftovers = ("MirrorStager", "_ThreadBasedAsyncCheckpointExecutor")
    snap = ext_module.snapshot(snapshot_mode=SHARDED, async_save=True)
    manager, model = _build(tmp_path, snapshot=snap)
    gc.collect()
    gc.disable()  # no collection but finalize's own
    try:
        _train(manager, model)  # the stop trigger finalizes
        left = [o for o in gc.get_objects() if type(o).__name__ in leftovers]
    finally:
        gc.enable()
    assert left == []
