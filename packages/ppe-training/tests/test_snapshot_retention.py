"""snapshot(n_retains=...) keeps the newest snapshots with every writer the manager accepts."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.writing import (
    LocalFileSystem,
    ProcessQueueWriter,
    ProcessWriter,
    SimpleWriter,
    ThreadQueueWriter,
    ThreadWriter,
)


def plain_function_writer(
    filename: str, out_dir: str, target: Any, *, savefun: Any = None, append: bool = False
) -> None:
    """A user's writer that is a plain function."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, filename), "ab" if append else "wb") as f:
        (savefun or torch.save)(target, f)


class CallableWriter:
    """A user's writer that is not a ``Writer``: a callable object, nothing else."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, filename: str, out_dir: str, target: Any, **options: Any) -> None:
        self.calls.append(filename)
        plain_function_writer(filename, out_dir, target, **options)


class DuckWriter(CallableWriter):
    """A user's writer object with PPE's writer methods but no ``fs`` nor post-save hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def initialize(self, out_dir: str) -> None:
        self.events.append(f"initialize {out_dir}")

    def finalize(self) -> None:
        self.events.append("finalize")


class TaggingWriter(SimpleWriter):
    """A user's SimpleWriter subclass overriding ``__call__``, as PPE users write them."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Any = None,
        append: bool = False,
    ) -> None:
        self.written.append(filename)
        super().__call__(filename, out_dir, target, savefun=savefun, append=append)


WRITERS: dict[str, Callable[[], Any]] = {
    "callable-object": CallableWriter,
    "duck-typed-writer": DuckWriter,
    "function": lambda: plain_function_writer,
    "SimpleWriter": SimpleWriter,
    "ThreadWriter": ThreadWriter,
    "ProcessWriter": lambda: ProcessWriter(mp_context="fork"),
    "ThreadQueueWriter": ThreadQueueWriter,
    "ProcessQueueWriter": lambda: ProcessQueueWriter(mp_context="fork"),
    "SimpleWriter-subclass": TaggingWriter,
}


def _train(out: Path, iterations: int, **options: Any) -> ExtensionsManager:
    """Run ``iterations`` iterations with a snapshot each iteration; return the manager."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager_writer = options.pop("manager_writer", None)
    manager = ExtensionsManager(
        model,
        optimizer,
        iterations,
        iters_per_epoch=1,
        out_dir=str(out),
        writer=manager_writer,
    )
    manager.extend(ext_module.snapshot(**options), trigger=(1, "iteration"))
    while not manager.stop_trigger:
        with manager.run_iteration():
            model(torch.ones(3)).sum().backward()
            optimizer.step()
    return manager


def _snapshots(directory: Path) -> list[str]:
    return sorted(
        (n for n in os.listdir(directory) if n.startswith("snapshot_iter_")),
        key=lambda n: int(n.rsplit("_", 1)[1]),
    )


def _check_the_two_newest_remain(directory: Path) -> None:
    assert _snapshots(directory) == ["snapshot_iter_4", "snapshot_iter_5"]
    for iteration in (4, 5):
        state = torch.load(directory / f"snapshot_iter_{iteration}", weights_only=True)
        assert state["_start_iteration"] == iteration


@pytest.mark.parametrize("kind", list(WRITERS))
def test_n_retains_keeps_the_two_newest_with_the_managers_writer(tmp_path: Path, kind: str) -> None:
    _train(tmp_path, 5, n_retains=2, manager_writer=WRITERS[kind]())
    _check_the_two_newest_remain(tmp_path)


@pytest.mark.parametrize("kind", list(WRITERS))
def test_n_retains_keeps_the_two_newest_with_the_snapshots_own_writer(
    tmp_path: Path, kind: str
) -> None:
    _train(tmp_path, 5, n_retains=2, writer=WRITERS[kind]())
    _check_the_two_newest_remain(tmp_path)


def test_a_callable_writer_is_the_one_retention_follows_and_autoload_reads(
    tmp_path: Path,
) -> None:
    writer = CallableWriter()
    _train(tmp_path, 5, n_retains=2, manager_writer=writer)
    assert writer.calls == [f"snapshot_iter_{i}" for i in range(1, 6)]
    resumed = _train(tmp_path, 7, n_retains=2, autoload=True, manager_writer=CallableWriter())
    assert resumed.get_extension("_Snapshot").resumed_from == str(tmp_path / "snapshot_iter_5")
    assert _snapshots(tmp_path) == ["snapshot_iter_6", "snapshot_iter_7"]


def test_a_duck_typed_writer_is_initialized_and_finalized_once(tmp_path: Path) -> None:
    writer = DuckWriter()
    _train(tmp_path, 5, n_retains=2, manager_writer=writer)
    assert writer.events == [f"initialize {tmp_path}", "finalize"]
    _check_the_two_newest_remain(tmp_path)


def test_subclass_writes_through_its_own_call(tmp_path: Path) -> None:
    writer = TaggingWriter()
    _train(tmp_path, 5, n_retains=2, manager_writer=writer)
    assert writer.written == [f"snapshot_iter_{i}" for i in range(1, 6)]
    _check_the_two_newest_remain(tmp_path)


@pytest.mark.parametrize("kind", ["SimpleWriter", "ThreadWriter"])
def test_n_retains_works_in_the_out_dir_of_the_snapshots_own_writer(
    tmp_path: Path, kind: str
) -> None:
    own = tmp_path / "own"
    writer_class = SimpleWriter if kind == "SimpleWriter" else ThreadWriter
    _train(tmp_path / "out", 5, n_retains=2, writer=writer_class(out_dir=str(own)))
    _check_the_two_newest_remain(own)
    assert not (tmp_path / "out").exists() or _snapshots(tmp_path / "out") == []


class _NoRemoveFileSystem(LocalFileSystem):
    """A file system a user wrote without ``remove``."""

    remove = None  # type: ignore[assignment]


def test_n_retains_with_a_file_system_that_cannot_remove_fails_when_training_starts(
    tmp_path: Path,
) -> None:
    writer = SimpleWriter()
    writer.fs = _NoRemoveFileSystem()
    with pytest.raises(TypeError, match=r"snapshot\(n_retains=2\).*lacks remove"):
        _train(tmp_path, 5, n_retains=2, writer=writer)
    assert _snapshots(tmp_path) == []


def test_a_writer_that_is_not_callable_is_rejected_by_the_manager_and_the_snapshot() -> None:
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"writer must be .* got 'result'"):
        ExtensionsManager(model, optimizer, 1, iters_per_epoch=1, writer="result")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"snapshot: writer must be .* got 3"):
        ext_module.snapshot(writer=3)  # type: ignore[arg-type]


class _MinimalFileSystem(LocalFileSystem):
    """A user's file system with only the methods a writer needs (no isdir, size...)."""

    isdir = None  # type: ignore[assignment]
    size = None  # type: ignore[assignment]
    remove_tree = None  # type: ignore[assignment]
    fsync = None  # type: ignore[assignment]
    fsync_dir = None  # type: ignore[assignment]
    local_root = None


def test_a_minimal_file_system_retains_autoloads_and_refuses_to_replace_a_directory(
    tmp_path: Path,
) -> None:
    _train(tmp_path, 5, n_retains=2, writer=SimpleWriter(fs=_MinimalFileSystem()))
    _check_the_two_newest_remain(tmp_path)
    resumed = _train(tmp_path, 5, autoload=True, writer=SimpleWriter(fs=_MinimalFileSystem()))
    assert resumed.iteration == 5
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "snapshot_iter_1").mkdir()
    (tmp_path / "other" / "snapshot_iter_1" / "mine.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"snapshot_iter_1' is a directory"):
        _train(tmp_path / "other", 1, writer=SimpleWriter(fs=_MinimalFileSystem()))
    assert (tmp_path / "other" / "snapshot_iter_1" / "mine.txt").read_text() == "mine"
