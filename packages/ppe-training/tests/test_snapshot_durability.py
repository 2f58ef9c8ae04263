"""What a snapshot promises when the file system fails or holds what it did not write
(issue 33): an OSError while reading is an error, never damage; a same-name rewrite killed
half way loses nothing; foreign files, links and directories are never replaced nor deleted;
a damaged manifest or .metadata is named. The full enumeration of faults is
test_fault_injection.py."""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.writing import LocalFileSystem, SimpleWriter

SHARDED = ext_module.SnapshotMode.SHARDED


def _build(out: Path, snapshot: Any, trigger: Any = (2, "iteration")) -> ExtensionsManager:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(model, optimizer, 3, iters_per_epoch=4, out_dir=str(out))
    manager.extend(snapshot, trigger=trigger)
    return manager


def _train(manager: ExtensionsManager, n: int) -> None:
    model = manager.models["main"]
    optimizer = manager.optimizers["main"]
    for _ in range(n):
        with manager.run_iteration():
            loss = model(torch.ones(3) * manager.iteration).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            reporting.report({"loss": loss.item()})


class FlakyFileSystem(LocalFileSystem):
    """The local disk, whose first ``failures`` opens for reading of snapshot files raise
    ``OSError(EIO)``: an NFS or S3 hiccup during autoload."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.opened: list[str] = []

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        if "r" in mode and os.path.basename(path).startswith(("snapshot", "ppe_snapshot")):
            self.opened.append(path)
            if self.failures > 0:
                self.failures -= 1
                raise OSError(errno.EIO, "Input/output error", path)
        return super().open(path, mode)


@pytest.mark.parametrize("mode", ["DEFAULT", "SHARDED"])
def test_an_oserror_while_autoloading_is_an_error_not_damage(tmp_path: Path, mode: str) -> None:
    def snapshot(fs: Any) -> Any:
        return ext_module.snapshot(
            writer=SimpleWriter(fs=fs),
            autoload=True,
            snapshot_mode=ext_module.SnapshotMode[mode],
        )

    manager = _build(tmp_path, snapshot(None))
    _train(manager, 4)
    saved = {name: _content(tmp_path / name) for name in ("snapshot_iter_2", "snapshot_iter_4")}

    flaky = FlakyFileSystem(failures=2)
    with pytest.raises(OSError, match=r"snapshot_iter_4.* not damage") as raised:
        _build(tmp_path, snapshot(flaky)).start_extensions()
    assert raised.value.errno == errno.EIO
    # Nothing was skipped, nor overwritten by a run that started over.
    assert {name: _content(tmp_path / name) for name in saved} == saved

    # Once the file system answers again, the run resumes from the newest snapshot.
    resumed = _build(tmp_path, snapshot(FlakyFileSystem(failures=0)))
    resumed.start_extensions()
    assert resumed.iteration == 4


def _content(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def _killed_at_the_second_rename_of(name: str, out: Path) -> None:
    # In a forked child: the manager saves epoch-named snapshots twice an epoch; the second
    # save of ``name`` is killed between "the committed one aside" and "the new one in".
    commits: list[str] = []

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.basename(os.fspath(dst)) == name and (Path(src) / "ppe_snapshot.json").exists():
            commits.append(os.fspath(src))
            if len(commits) == 2:  # the new one goes in after the old one went aside
                os._exit(9)
        real_replace(src, dst, *args, **kwargs)

    real_replace = os.replace
    os.replace = replace  # this process only: it is killed in it
    manager = _build(out, _sharded("snapshot_epoch_{.epoch}"))
    _train(manager, 6)  # epoch 1 is saved at iterations 4 and 6
    os._exit(0)  # not reached


def _sharded(filename: str, **kwargs: Any) -> Any:
    return ext_module.snapshot(filename=filename, snapshot_mode=SHARDED, autoload=True, **kwargs)


def test_a_sharded_rewrite_of_the_same_name_killed_half_way_keeps_a_committed_snapshot(
    tmp_path: Path,
) -> None:
    child = multiprocessing.get_context("fork").Process(
        target=_killed_at_the_second_rename_of, args=("snapshot_epoch_1", tmp_path)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 9
    # Killed between the renames: no snapshot_epoch_1, two complete temporaries.
    names = sorted(name for name in os.listdir(tmp_path) if ".lease-" not in name)
    assert names[-1] == "snapshot_epoch_0"
    assert len(names) == 3
    assert all(name.startswith(".snapshot_epoch_1.tmp-") for name in names[:2])

    resumed = _build(tmp_path, _sharded("snapshot_epoch_{.epoch}"))
    with pytest.warns(UserWarning, match=r"recovered the snapshot .*snapshot_epoch_1'"):
        resumed.start_extensions()
    assert resumed.iteration == 6  # the newer of the two: the save that was being committed
    # the other temporary is removed, and the leases of the killed process
    assert sorted(os.listdir(tmp_path)) == ["snapshot_epoch_0", "snapshot_epoch_1"]


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path.parent / f"{tmp_path.name}-outside"
    path.mkdir()
    yield path


def test_a_foreign_file_named_like_a_snapshot_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "snapshot_iter_2").write_text("my notes")
    manager = _build(tmp_path, ext_module.snapshot())
    with pytest.raises(FileExistsError, match=r"snapshot_iter_2' is a file that is not a snapsh"):
        _train(manager, 2)
    assert (tmp_path / "snapshot_iter_2").read_text() == "my notes"


def test_a_symlink_named_like_a_snapshot_is_never_replaced(tmp_path: Path, outside: Path) -> None:
    target = outside / "best.pt"
    torch.save({"a": 1}, target)
    (tmp_path / "snapshot_iter_2").symlink_to(target)
    manager = _build(tmp_path, ext_module.snapshot())
    with pytest.raises(FileExistsError, match=r"snapshot_iter_2' is a symbolic link"):
        _train(manager, 2)
    assert (tmp_path / "snapshot_iter_2").resolve() == target
    assert torch.load(target, weights_only=True) == {"a": 1}


def test_retention_deletes_only_the_snapshots_it_can_read_as_its_own(
    tmp_path: Path, outside: Path
) -> None:
    # An old file of the user's, a link to a kept model, a directory: all named like snapshots.
    (tmp_path / "snapshot_iter_0").write_text("my notes")
    torch.save({"kept": 1}, outside / "model.pt")
    (tmp_path / "snapshot_iter_1").symlink_to(outside / "model.pt")
    (tmp_path / "snapshot_iter_3").mkdir()
    manager = _build(tmp_path, ext_module.snapshot(n_retains=2))
    with pytest.warns(UserWarning) as warned:
        _train(manager, 8)
    assert sorted(os.listdir(tmp_path)) == [
        "snapshot_iter_0",
        "snapshot_iter_1",
        "snapshot_iter_3",
        "snapshot_iter_6",
        "snapshot_iter_8",
    ]
    assert (tmp_path / "snapshot_iter_0").read_text() == "my notes"
    assert torch.load(tmp_path / "snapshot_iter_1", weights_only=True) == {"kept": 1}
    messages = "\n".join(str(w.message) for w in warned)
    for name, why in (
        ("snapshot_iter_0", "does not start as a snapshot file"),
        ("snapshot_iter_1", "is a symbolic link"),
        ("snapshot_iter_3", "is a directory"),
    ):
        assert f"{name}' is named like a snapshot but {why}; it is left as it is" in messages
        assert messages.count(f"{name}'") == 1  # once, not at every save


def test_sharded_retention_never_follows_a_link_nor_aborts(tmp_path: Path, outside: Path) -> None:
    manager = _build(outside, _sharded("snapshot_iter_{.iteration}"))
    _train(manager, 2)
    (tmp_path / "snapshot_iter_1").symlink_to(outside / "snapshot_iter_2")
    manager = _build(tmp_path, ext_module.snapshot(snapshot_mode=SHARDED, n_retains=1))
    with pytest.warns(UserWarning, match=r"snapshot_iter_1' is named like a snapshot but is a sym"):
        _train(manager, 6)
    assert sorted(os.listdir(tmp_path)) == ["snapshot_iter_1", "snapshot_iter_6"]
    assert (outside / "snapshot_iter_2" / "ppe_snapshot.json").is_file()


def test_a_damaged_sharded_metadata_is_an_error_naming_the_snapshot(tmp_path: Path) -> None:
    manager = _build(tmp_path, _sharded("snapshot_iter_{.iteration}"))
    _train(manager, 4)
    metadata = tmp_path / "snapshot_iter_4" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:20])
    with pytest.raises(ValueError, match=r"snapshot_iter_4' is damaged: its \.metadata .*cannot"):
        _build(tmp_path, _sharded("snapshot_iter_{.iteration}")).start_extensions()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "is a directory that is"),
        (lambda p: (p.mkdir(), (p / "ppe_snapshot.json").write_text("{")), "manifest is damaged"),
        (lambda p: p.write_text("mine"), None),
    ],
    ids=["unknown directory", "damaged manifest", "text file"],
)
def test_sharded_autoload_skips_what_never_committed_and_leaves_it(
    tmp_path: Path, make: Callable[[Path], Any], match: str | None
) -> None:
    manager = _build(tmp_path, _sharded("snapshot_iter_{.iteration}"))
    _train(manager, 2)
    foreign = tmp_path / "snapshot_iter_9"
    make(foreign)
    before = _content(foreign)
    resumed = _build(tmp_path, _sharded("snapshot_iter_{.iteration}"))
    with pytest.warns(UserWarning, match=r"snapshot_iter_9") as warned:
        resumed.start_extensions()
    if match is not None:
        assert match in str(warned[0].message)
    assert resumed.iteration == 2
    assert _content(foreign) == before


def test_a_writer_used_again_keeps_no_retention_of_an_ended_run(tmp_path: Path) -> None:
    writer = SimpleWriter(out_dir=str(tmp_path / "snapshots"))
    target = torch.nn.Linear(2, 2)
    manager = _build(
        tmp_path,
        ext_module.snapshot_object(target, "model_{.iteration}", writer=writer, n_retains=1),
    )
    _train(manager, 12)  # the last iteration: the manager finalizes its extensions
    ended = weakref.ref(target)
    del manager, target
    gc.collect()
    assert ended() is None  # the writer's hook held the extension and its target
    target = torch.nn.Linear(2, 2)
    manager = _build(
        tmp_path,
        ext_module.snapshot_object(target, "model_{.iteration}", writer=writer, n_retains=2),
    )
    _train(manager, 12)
    # Only this run's retention (2) ran: the ended run's (1) would have left one.
    assert sorted(os.listdir(tmp_path / "snapshots")) == ["model_10", "model_12"]
