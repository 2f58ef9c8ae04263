"""snapshot / snapshot_object: writing, autoload, fallback, retention."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.writing import SimpleWriter, ThreadWriter


def _build(
    tmp_path: Any, *snapshots: Any, iters_per_epoch: int = 2, max_epochs: int = 5
) -> tuple[ExtensionsManager, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    manager = ExtensionsManager(
        model, optimizer, max_epochs, iters_per_epoch=iters_per_epoch, out_dir=tmp_path
    )
    manager.extend(ext_module.LogReport())
    for snapshot in snapshots:
        if isinstance(snapshot, tuple):
            manager.extend(snapshot[0], trigger=snapshot[1])
        else:
            manager.extend(snapshot)
    return manager, model


def _train(manager: ExtensionsManager, model: torch.nn.Module, n: int | None = None) -> int:
    done = 0
    optimizer = manager.optimizers["main"]
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            x = torch.arange(3.0, device=model.weight.device) + manager.iteration
            loss = model(x).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            reporting.report({"loss": loss.item()})
        done += 1
    return done


def _names(tmp_path: Any) -> list[str]:
    return sorted(os.listdir(tmp_path))


def test_snapshot_writes_the_manager_state_once_per_epoch(tmp_path: Any) -> None:
    manager, model = _build(tmp_path, ext_module.snapshot())
    _train(manager, model)
    assert _names(tmp_path) == ["log"] + [f"snapshot_iter_{i}" for i in (10, 2, 4, 6, 8)]
    state = torch.load(tmp_path / "snapshot_iter_6", weights_only=True)
    assert state["_start_iteration"] == 6
    assert set(state) >= {
        "_start_iteration",
        "_start_execution",
        "models",
        "optimizers",
        "extensions",
        "state_objects",
        "ppe_version",
        "stop_trigger",
    }
    assert len(state["extensions"]["LogReport"]["extension"]["log"]) == 3


def test_snapshot_filename_callable_and_condition(tmp_path: Any) -> None:
    allowed = [True, False, True, False, True]
    snap = ext_module.snapshot(
        filename=lambda m: f"epoch-{m.epoch}.pt", condition=lambda: allowed.pop(0)
    )
    manager, model = _build(tmp_path, snap)
    _train(manager, model)
    assert [n for n in _names(tmp_path) if n.startswith("epoch")] == [
        "epoch-1.pt",
        "epoch-3.pt",
        "epoch-5.pt",
    ]


def test_snapshot_with_savefun_and_subdirectory(tmp_path: Any) -> None:
    saved: list[int] = []

    def savefun(target: Any, fileobj: Any, **kwargs: Any) -> None:
        saved.append(target["_start_iteration"])
        torch.save(target, fileobj)

    snap = ext_module.snapshot(savefun, "snaps/snap_{.epoch}", n_retains=2, autoload=True)
    manager, model = _build(tmp_path, snap)
    _train(manager, model)
    assert saved == [2, 4, 6, 8, 10]
    assert sorted(os.listdir(tmp_path / "snaps")) == ["snap_4", "snap_5"]
    resumed, resumed_model = _build(
        tmp_path, ext_module.snapshot(filename="snaps/snap_{.epoch}", autoload=True)
    )
    assert _train(resumed, resumed_model) == 0
    assert resumed.iteration == 10


def test_autoload_picks_highest_iteration_not_name_order_nor_mtime(tmp_path: Any) -> None:
    manager, model = _build(tmp_path, (ext_module.snapshot(), (1, "iteration")), max_epochs=6)
    _train(manager, model, 10)
    os.utime(tmp_path / "snapshot_iter_9", (2e9, 2e9))  # the newest modification time
    (tmp_path / ".snapshot_iter_99.tmp-0badc0de-1-12345678").write_bytes(b"partial")
    (tmp_path / "snapshot_iter_50.bak").write_bytes(b"backup")
    (tmp_path / "snapshot_iter_x").write_bytes(b"other")
    resumed, resumed_model = _build(
        tmp_path, (ext_module.snapshot(autoload=True), (1, "iteration")), max_epochs=6
    )
    assert _train(resumed, resumed_model, 1) == 1
    assert resumed.iteration == 11
    assert resumed.get_extension("_Snapshot").resumed_from == str(tmp_path / "snapshot_iter_10")


def test_autoload_skips_truncated_snapshot_and_loads_the_previous(tmp_path: Any) -> None:
    snap = (ext_module.snapshot(n_retains=3), (2, "iteration"))
    manager, model = _build(tmp_path, snap)
    _train(manager, model, 6)
    expected = torch.load(tmp_path / "snapshot_iter_4", weights_only=True)
    newest = tmp_path / "snapshot_iter_6"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    resumed, resumed_model = _build(
        tmp_path, (ext_module.snapshot(n_retains=3, autoload=True), (2, "iteration"))
    )
    with pytest.warns(UserWarning, match="cannot load the snapshot .*snapshot_iter_6"):
        resumed.start_extensions()
    assert resumed.iteration == 4
    torch.testing.assert_close(resumed_model.weight, expected["models"]["main"]["weight"])
    # Training on rewrites snapshot_iter_6 (complete now) and retention counts it again.
    _train(resumed, resumed_model)
    assert [n for n in _names(tmp_path) if n.startswith("snapshot")] == [
        "snapshot_iter_10",
        "snapshot_iter_6",
        "snapshot_iter_8",
    ]
    torch.load(tmp_path / "snapshot_iter_6", weights_only=True)


def test_n_retains_never_counts_unloadable_files_nor_deletes_the_resumed_snapshot_early(
    tmp_path: Any,
) -> None:
    manager, model = _build(tmp_path, (ext_module.snapshot(n_retains=1), (2, "iteration")))
    _train(manager, model, 4)
    assert [n for n in _names(tmp_path) if n.startswith("snapshot")] == ["snapshot_iter_4"]
    (tmp_path / "snapshot_iter_100").write_bytes(b"garbage from a failed copy")
    resumed, resumed_model = _build(
        tmp_path, (ext_module.snapshot(n_retains=1, autoload=True), (2, "iteration"))
    )
    with pytest.warns(UserWarning, match="snapshot_iter_100"):
        _train(resumed, resumed_model, 1)  # iteration 5: no snapshot yet
    assert (tmp_path / "snapshot_iter_4").exists()
    _train(resumed, resumed_model, 1)  # iteration 6: complete, so 4 may go
    assert [n for n in _names(tmp_path) if n.startswith("snapshot")] == [
        "snapshot_iter_100",
        "snapshot_iter_6",
    ]


def test_n_retains_with_async_writer_deletes_only_after_the_new_file_is_complete(
    tmp_path: Any,
) -> None:
    release = threading.Event()

    def slow_save(target: Any, fileobj: Any, **kwargs: Any) -> None:
        if target["_start_iteration"] == 4:
            assert release.wait(30)
        torch.save(target, fileobj)

    writer = ThreadWriter(savefun=slow_save)
    manager, model = _build(
        tmp_path, (ext_module.snapshot(writer=writer, n_retains=1), (2, "iteration"))
    )
    _train(manager, model, 4)  # the write of snapshot_iter_4 is blocked
    assert (tmp_path / "snapshot_iter_2").exists()
    assert not (tmp_path / "snapshot_iter_4").exists()
    release.set()
    writer.finalize()
    assert [n for n in _names(tmp_path) if n.startswith("snapshot")] == ["snapshot_iter_4"]
    manager.finalize()


def test_resuming_a_finished_run_does_no_iteration(tmp_path: Any) -> None:
    manager, model = _build(tmp_path, ext_module.snapshot(autoload=True))
    assert _train(manager, model) == 10
    resumed, resumed_model = _build(tmp_path, ext_module.snapshot(autoload=True))
    assert _train(resumed, resumed_model) == 0
    assert resumed.iteration == 10
    assert resumed.get_extension("LogReport").log == manager.get_extension("LogReport").log


def test_autoload_without_snapshot_starts_from_scratch(tmp_path: Any) -> None:
    manager, model = _build(tmp_path / "fresh", ext_module.snapshot(autoload=True))
    assert _train(manager, model, 3) == 3
    assert manager.get_extension("_Snapshot").resumed_from is None


def test_autoload_warns_about_extensions_added_or_removed_since_the_snapshot(tmp_path: Any) -> None:
    manager, model = _build(tmp_path, ext_module.snapshot(autoload=True))
    manager.extend(ext_module.LogReport(filename="old.json"), name="old_log")
    _train(manager, model, 4)
    resumed, resumed_model = _build(tmp_path, ext_module.snapshot(autoload=True))
    resumed.extend(ext_module.LogReport(filename="new.json"), name="new_log")
    with pytest.warns(UserWarning) as records:
        _train(resumed, resumed_model)
    messages = " ".join(str(r.message) for r in records)
    assert "['new_log']" in messages and "['old_log']" in messages
    assert resumed.iteration == 10


class _Opaque:
    def __init__(self, value: int) -> None:
        self.value = value


class _HoldsObject:
    def state_dict(self) -> dict[str, Any]:
        return {"obj": _Opaque(3)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loaded = state


def test_autoload_refuses_non_weights_only_content_with_a_fix_in_the_message(tmp_path: Any) -> None:
    target = _HoldsObject()
    manager, model = _build(tmp_path, ext_module.snapshot_object(target, "obj_{.epoch}"))
    _train(manager, model, 2)
    resumed, _ = _build(
        tmp_path, ext_module.snapshot_object(_HoldsObject(), "obj_{.epoch}", autoload=True)
    )
    with pytest.raises(pickle.UnpicklingError, match="add_safe_globals"):
        resumed.start_extensions()
    try:
        torch.serialization.add_safe_globals([_Opaque])
        other = _HoldsObject()
        resumed, _ = _build(
            tmp_path, ext_module.snapshot_object(other, "obj_{.epoch}", autoload=True)
        )
        resumed.start_extensions()
        assert other.loaded["obj"].value == 3
    finally:
        torch.serialization.clear_safe_globals()


def test_snapshot_object_saves_and_autoloads_a_model(tmp_path: Any) -> None:
    manager, model = _build(tmp_path)
    manager.extend(ext_module.snapshot_object(model, "model_{.epoch}.pt"))
    _train(manager, model)
    fresh = torch.nn.Linear(3, 1)
    manager2, _ = _build(tmp_path / "other")
    manager2.extend(
        ext_module.snapshot_object(fresh, str(tmp_path / "model_{.epoch}.pt"), autoload=True)
    )
    manager2.start_extensions()
    torch.testing.assert_close(fresh.weight, model.weight)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"savefun": torch.save, "writer": SimpleWriter()}, TypeError, "either savefun or writer"),
        ({"n_retains": 0}, ValueError, "n_retains must be a positive integer, or -1.*got 0"),
        ({"autoload": True, "filename": lambda m: "x"}, ValueError, "need a str filename"),
        ({"n_retains": 2, "filename": "{.epoch}/snap"}, ValueError, "directory part"),
        ({"filename": 3}, TypeError, "str or a callable, got 3"),
        ({"saver_rank": -1}, ValueError, "saver_rank must be a rank.*got -1"),
        ({"condition": True}, TypeError, "condition must be a callable"),
    ],
)
def test_snapshot_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ext_module.snapshot(**kwargs)


def test_saver_rank_needs_torch_distributed(tmp_path: Any) -> None:
    manager, _ = _build(tmp_path, ext_module.snapshot(saver_rank=0))
    with pytest.raises(RuntimeError, match=r"saver_rank=0.*needs torch.distributed"):
        manager.start_extensions()


@pytest.mark.slow
def test_saver_rank_writes_on_one_rank_and_every_rank_autoloads(
    tmp_path: Any, free_port: Callable[[], int]
) -> None:
    script = Path(__file__).with_name("training_dist_snapshot.py")
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(rank), "2", port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    for process, (stdout, _) in zip(processes, outputs):
        assert process.returncode == 0, [o[1][-3000:] for o in outputs]
        assert "RESUMED 4" in stdout
    assert _names(tmp_path) == ["snapshot_iter_2", "snapshot_iter_4"]


@pytest.mark.slow
def test_snapshot_on_error_is_written_by_the_saver_rank_only(
    tmp_path: Any, free_port: Callable[[], int]
) -> None:
    script = Path(__file__).with_name("training_dist_snapshot.py")
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(rank), "2", port, "on_error"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    for rank, (process, (stdout, _)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, [o[1][-3000:] for o in outputs]
        assert f"FAILED diverged on rank {rank}" in stdout
    assert (tmp_path / "writers").read_text() == "0\n"
    assert _names(tmp_path) == ["error_2", "writers"]
    state = torch.load(tmp_path / "error_2", weights_only=True)
    assert state["_start_iteration"] == 2


@pytest.mark.gpu
def test_cuda_training_resumes_from_cpu_loaded_snapshot_without_per_iteration_syncs(
    tmp_path: Any,
) -> None:
    def build() -> tuple[ExtensionsManager, torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        manager = ExtensionsManager(model, optimizer, 2, iters_per_epoch=4, out_dir=tmp_path)
        manager.extend(ext_module.LogReport())
        manager.extend(ext_module.snapshot(autoload=True))
        return manager, model, optimizer

    manager, model, optimizer = build()
    manager.start_extensions()
    x = torch.ones(2, 3, device="cuda")
    for _ in range(3):  # no LogReport entry and no snapshot: nothing may synchronize
        torch.cuda.set_sync_debug_mode("error")
        try:
            with manager.run_iteration():
                loss = model(x).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                reporting.report({"loss": loss})
        finally:
            torch.cuda.set_sync_debug_mode("default")
    _train(manager, model)
    resumed, resumed_model, resumed_optimizer = build()
    resumed.start_extensions()
    assert resumed.iteration == 8
    assert resumed_model.weight.is_cuda
    torch.testing.assert_close(resumed_model.weight, model.weight)
    state = next(iter(resumed_optimizer.state.values()))
    assert state["momentum_buffer"].is_cuda
