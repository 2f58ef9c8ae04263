"""SimpleWriter, the Writer base and the crash-safe write protocol."""

from __future__ import annotations

import importlib
import io
import os
import re
import tempfile
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras.writing import (
    FileSystem,
    LocalFileSystem,
    ProcessWriter,
    SimpleWriter,
    Writer,
    is_temporary_file,
    remove_stale_temporaries,
    temporary_name,
)

HERE = Path(__file__).resolve().parent
TEMP_RE = re.compile(
    r"^\.(?P<base>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<rand>[0-9a-f]{8})$"
)


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("writing_helpers")


def write_bytes(data: bytes, fileobj: IO[bytes]) -> None:
    fileobj.write(data)


class RecordingFileSystem(LocalFileSystem):
    """The local filesystem, recording the write protocol's steps."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []
        self.on_fsync: list[Any] = []

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        self.events.append(("open", path, mode))
        return super().open(path, mode)

    def rename(self, src: str, dst: str) -> None:
        self.events.append(("rename", src, dst))
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self.events.append(("remove", path))
        super().remove(path)

    def fsync(self, fileobj: IO[Any]) -> None:
        self.events.append(("fsync", fileobj.name))
        for check in self.on_fsync:
            check(fileobj.name)
        super().fsync(fileobj)

    def fsync_dir(self, path: str) -> None:
        self.events.append(("fsync_dir", path))
        super().fsync_dir(path)


class MemoryFileSystem:
    """A user-defined in-memory filesystem: files without fileno() or fsync."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {""}

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        if "r" in mode:
            return io.BytesIO(self.files[path])
        if os.path.dirname(path) not in self.dirs:
            raise FileNotFoundError(path)
        files = self.files

        class _File(io.BytesIO):
            def close(self) -> None:
                if not self.closed:
                    files[path] = self.getvalue()
                super().close()

        return _File()

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        while path:
            self.dirs.add(path)
            path = os.path.dirname(path)

    def rename(self, src: str, dst: str) -> None:
        self.files[dst] = self.files.pop(src)

    def remove(self, path: str) -> None:
        del self.files[path]

    def listdir(self, path: str) -> list[str]:
        prefix = "" if path in ("", ".") else path + "/"
        return [name[len(prefix) :] for name in self.files if name.startswith(prefix)]


def test_simple_writer_saves_with_torch_save_by_default(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    SimpleWriter()("model.pt", str(tmp_path), model.state_dict())
    loaded = torch.load(tmp_path / "model.pt")
    assert torch.equal(loaded["weight"], model.weight) and torch.equal(loaded["bias"], model.bias)
    assert os.listdir(tmp_path) == ["model.pt"]


def test_savefun_gets_target_binary_file_and_writer_kwds(tmp_path: Path) -> None:
    calls: list[tuple[Any, bool, dict[str, Any]]] = []

    def savefun(target: Any, fileobj: IO[bytes], **kwds: Any) -> None:
        calls.append((target, "b" in fileobj.mode, kwds))
        fileobj.write(repr((target, kwds)).encode())

    writer = SimpleWriter(savefun=savefun, indent=2)
    writer("out.txt", str(tmp_path), {"a": 1})
    assert calls == [({"a": 1}, True, {"indent": 2})]
    assert (tmp_path / "out.txt").read_text() == "({'a': 1}, {'indent': 2})"


def test_call_savefun_overrides_the_writer_savefun(tmp_path: Path) -> None:
    writer = SimpleWriter()
    writer("data.bin", str(tmp_path), b"raw bytes", savefun=write_bytes)
    assert (tmp_path / "data.bin").read_bytes() == b"raw bytes"


def test_torch_save_kwds_are_forwarded(tmp_path: Path) -> None:
    SimpleWriter(pickle_protocol=2)("t.pt", str(tmp_path), {"x": torch.ones(2)})
    assert torch.equal(torch.load(tmp_path / "t.pt")["x"], torch.ones(2))


@pytest.mark.parametrize("filename", ["a.pt", "sub/dir/a.pt"])
def test_missing_directories_are_created(tmp_path: Path, filename: str) -> None:
    out_dir = tmp_path / "not" / "yet"
    SimpleWriter()(filename, str(out_dir), {"v": 1})
    assert torch.load(out_dir / filename) == {"v": 1}


def test_paths_may_be_pathlike_and_out_dir_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = SimpleWriter(savefun=write_bytes)
    writer(Path("rel.bin"), "", b"1")  # type: ignore[arg-type]
    writer("abs.bin", tmp_path / "d", b"2")  # type: ignore[arg-type]
    assert (tmp_path / "rel.bin").read_bytes() == b"1"
    assert (tmp_path / "d" / "abs.bin").read_bytes() == b"2"


def test_write_goes_through_synced_hidden_temporary_then_rename(tmp_path: Path) -> None:
    fs = RecordingFileSystem()
    writer = SimpleWriter(savefun=write_bytes, fs=fs)
    out_dir = str(tmp_path)
    writer("log.bin", out_dir, b"old")
    dest = os.path.join(out_dir, "log.bin")

    def at_fsync(tmp: str) -> None:
        # Everything is flushed before the fsync, and the destination still
        # holds the previous complete content.
        assert Path(tmp).read_bytes() == b"new content"
        assert Path(dest).read_bytes() == b"old"

    fs.on_fsync.append(at_fsync)
    fs.events.clear()
    writer("log.bin", out_dir, b"new content")
    # The temporary's lease exists from before its creation until after its rename.
    (_, lease, lease_mode), (_, tmp, mode), fsync, rename, removal, fsync_dir = fs.events
    assert lease == tmp + ".lease-15000" and lease_mode == "wb" and removal == ("remove", lease)
    assert mode == "wb"
    assert os.path.dirname(tmp) == out_dir
    assert os.path.basename(tmp).startswith(".log.bin.tmp-")
    assert is_temporary_file(tmp)
    assert fsync == ("fsync", tmp)
    assert rename == ("rename", tmp, dest)
    assert fsync_dir == ("fsync_dir", out_dir)
    assert Path(dest).read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["log.bin"]


def test_temporary_names_are_unique_and_recognisable(tmp_path: Path) -> None:
    fs = RecordingFileSystem()
    writer = SimpleWriter(savefun=write_bytes, fs=fs)
    for _ in range(20):
        writer("x", str(tmp_path), b"")
    opened = [os.path.basename(e[1]) for e in fs.events if e[0] == "open"]
    temporaries = [name for name in opened if ".lease-" not in name]
    assert len(set(temporaries)) == 20 and len(opened) == 40
    for name in temporaries:
        match = TEMP_RE.match(name)
        assert match is not None and match["base"] == "x" and int(match["pid"]) == os.getpid()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (".snapshot_iter_10.tmp-0123abcd-42-deadbeef", True),
        (".snapshot_iter_10.tmp-0123abcd-42-deadbeef.lease-15000", True),  # its lease
        (".snapshot_iter_10.tmp-0123abcd-42-deadbeef.lease-0", False),
        ("out/.log.jsonl.tmp-0123abcd-1-00000000", True),
        ("snapshot_iter_10", False),
        (".snapshot_iter_10", False),
        ("snapshot_iter_10.tmp-0123abcd-42-deadbeef", False),
        (".x.tmp-nothex!-42-deadbeef", False),
    ],
)
def test_is_temporary_file(name: str, expected: bool) -> None:
    assert is_temporary_file(name) is expected


@pytest.mark.parametrize("append", [False, True])
def test_failing_savefun_keeps_previous_file_and_leaves_no_temporary(
    tmp_path: Path, helpers: ModuleType, append: bool
) -> None:
    writer = SimpleWriter(savefun=write_bytes)
    writer("f.bin", str(tmp_path), b"complete")
    with pytest.raises(helpers.SaveFailedError, match="cannot save a dict"):
        writer("f.bin", str(tmp_path), {}, savefun=helpers.failing_save, append=append)
    assert (tmp_path / "f.bin").read_bytes() == b"complete"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_keyboard_interrupt_during_write_leaves_no_temporary(tmp_path: Path) -> None:
    def interrupted(target: Any, fileobj: IO[bytes]) -> None:
        fileobj.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        SimpleWriter(savefun=interrupted)("f.bin", str(tmp_path), None)
    assert os.listdir(tmp_path) == []


def test_append_adds_after_existing_content(tmp_path: Path) -> None:
    writer = SimpleWriter(savefun=write_bytes)
    for line in (b"1\n", b"2\n", b"3\n"):
        writer("log.jsonl", str(tmp_path), line, append=True)
    assert (tmp_path / "log.jsonl").read_bytes() == b"1\n2\n3\n"
    writer("log.jsonl", str(tmp_path), b"fresh\n")
    assert (tmp_path / "log.jsonl").read_bytes() == b"fresh\n"
    assert os.listdir(tmp_path) == ["log.jsonl"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.booleans()), min_size=1, max_size=8))
def test_content_matches_a_model_of_appends_and_replacements(
    writes: list[tuple[bytes, bool]],
) -> None:
    writer = SimpleWriter(savefun=write_bytes)
    expected = b""
    with tempfile.TemporaryDirectory() as out_dir:
        for data, append in writes:
            writer("f", out_dir, data, append=append)
            expected = expected + data if append else data
            assert Path(out_dir, "f").read_bytes() == expected
        assert os.listdir(out_dir) == ["f"]


def _dead_pid() -> int:
    process = torch.multiprocessing.get_context("fork").Process(target=os.getpid)
    process.start()
    process.join()
    assert process.pid is not None
    return process.pid


def _leftover(tmp_path: Path, helpers: ModuleType) -> Path:
    """A real temporary left by a writer process killed mid-write (with its lease)."""
    writer = ProcessWriter(savefun=helpers.suicidal_save)
    writer("snap.pt", str(tmp_path), {"v": 1})
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        writer.finalize()
    (name, lease) = sorted(os.listdir(tmp_path))
    assert lease == name + ".lease-15000" and is_temporary_file(lease)
    assert is_temporary_file(name) and name.startswith(".snap.pt.tmp-")
    assert (tmp_path / name).read_bytes() == b"partial content"
    return tmp_path / name


def test_next_write_removes_temporaries_of_dead_processes_only(
    tmp_path: Path, helpers: ModuleType
) -> None:
    dead = _leftover(tmp_path, helpers)
    match = TEMP_RE.match(dead.name)
    assert match is not None
    # The same kind of file, from a live process (our parent) and another host.
    live = tmp_path / dead.name.replace(f"-{match['pid']}-", f"-{os.getppid()}-")
    other_host = "00000000" if match["host"] != "00000000" else "11111111"
    remote = tmp_path / dead.name.replace(f"-{match['host']}-", f"-{other_host}-")
    live.write_bytes(b"in progress")
    remote.write_bytes(b"in progress")
    SimpleWriter()("snap.pt", str(tmp_path), {"v": 2})
    assert torch.load(tmp_path / "snap.pt") == {"v": 2}
    assert sorted(os.listdir(tmp_path)) == sorted(["snap.pt", live.name, remote.name])


def test_initialize_removes_stale_temporaries(tmp_path: Path, helpers: ModuleType) -> None:
    dead = _leftover(tmp_path, helpers)
    writer = SimpleWriter()
    writer.initialize(str(tmp_path))
    assert writer.out_dir == str(tmp_path)
    assert not dead.exists() and os.listdir(tmp_path) == []  # its lease went with it


def test_garbage_named_like_temporaries_never_breaks_a_write(tmp_path: Path) -> None:
    pid = _dead_pid()
    (tmp_path / f".a.tmp-00000000-{pid}-00000000").mkdir()  # a directory, not removable
    (tmp_path / f".a.tmp-zz-{pid}-1").write_bytes(b"not ours")
    SimpleWriter(savefun=write_bytes)("a", str(tmp_path), b"ok")
    assert (tmp_path / "a").read_bytes() == b"ok"


def test_any_object_with_the_filesystem_api_can_be_written_to() -> None:
    fs = MemoryFileSystem()
    assert isinstance(fs, FileSystem)
    writer = SimpleWriter(savefun=write_bytes, fs=fs)
    writer("log", "out/sub", b"a", append=True)
    writer("log", "out/sub", b"b", append=True)
    writer("model.pt", "out", {"w": torch.arange(3)}, savefun=torch.save)
    assert fs.files["out/sub/log"] == b"ab"
    assert torch.equal(torch.load(io.BytesIO(fs.files["out/model.pt"]))["w"], torch.arange(3))
    assert sorted(fs.files) == ["out/model.pt", "out/sub/log"]


class CountingWriter(Writer):
    """A user-defined writer built on Writer.save."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def __call__(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Any = None,
        append: bool = False,
    ) -> None:
        self.calls += 1
        self.save(filename, out_dir, target, savefun or write_bytes, append)


def test_writer_subclass_saves_atomically_and_runs_post_save_hooks(tmp_path: Path) -> None:
    seen: list[tuple[str, bytes]] = []
    writer = CountingWriter(out_dir=str(tmp_path))
    writer.add_post_save_hook(lambda path: seen.append((path, Path(path).read_bytes())))
    with writer:
        writer("a", writer.out_dir, b"1")
        writer("b", writer.out_dir, b"2")
    assert writer.calls == 2
    assert seen == [(str(tmp_path / "a"), b"1"), (str(tmp_path / "b"), b"2")]
    assert isinstance(writer.fs, LocalFileSystem)


def test_writer_base_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Writer()  # type: ignore[abstract]


def test_simple_writer_is_picklable_for_worker_processes(tmp_path: Path) -> None:
    import pickle

    writer = pickle.loads(pickle.dumps(SimpleWriter(out_dir="x", pickle_protocol=2)))
    writer("f.pt", str(tmp_path), [1, 2])
    assert torch.load(tmp_path / "f.pt") == [1, 2] and writer.out_dir == "x"


@pytest.mark.parametrize("savefun", [3, "torch.save", False])
def test_non_callable_savefun_is_rejected_at_construction(savefun: Any) -> None:
    with pytest.raises(
        TypeError, match=rf"savefun must be a callable.*got {re.escape(repr(savefun))}"
    ):
        SimpleWriter(savefun=savefun)


def test_non_callable_savefun_is_rejected_at_call(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"savefun must be a callable.*got 'pickle'"):
        SimpleWriter()("f", str(tmp_path), 1, savefun="pickle")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("filename", "out_dir", "error", "match"),
    [
        (None, "d", TypeError, "filename must be a str or os.PathLike, got None"),
        (12, "d", TypeError, "filename must be a str or os.PathLike, got 12"),
        ("", "d", ValueError, "filename must not be empty"),
        ("f", 3.5, TypeError, "out_dir must be a str or os.PathLike, got 3.5"),
        ("sub/", "d", ValueError, "needs a file name, got the directory path 'd/sub/'"),
    ],
)
def test_bad_paths_are_rejected(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    filename: Any,
    out_dir: Any,
    error: type,
    match: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=re.escape(match)):
        SimpleWriter()(filename, out_dir, 1)


def test_filesystem_without_the_api_is_rejected() -> None:
    class HalfFileSystem:
        def open(self, path: str, mode: str = "rb") -> None: ...

        def exists(self, path: str) -> bool:
            return False

    with pytest.raises(TypeError, match="lacks makedirs, rename, remove, listdir"):
        SimpleWriter(fs=HalfFileSystem())  # type: ignore[arg-type]


def test_savefun_closing_its_file_is_reported(tmp_path: Path) -> None:
    def closing(target: Any, fileobj: IO[bytes]) -> None:
        fileobj.write(b"x")
        fileobj.close()

    with pytest.raises(ValueError, match="closed the file object"):
        SimpleWriter(savefun=closing)("f", str(tmp_path), None)
    assert os.listdir(tmp_path) == []


def test_non_callable_post_save_hook_is_rejected() -> None:
    with pytest.raises(TypeError, match="post-save hook must be callable, got 5"):
        SimpleWriter().add_post_save_hook(5)  # type: ignore[arg-type]


def _make_temporary_directory(out_dir: str) -> None:
    # What code of your own does before being killed: a directory under a temporary name.
    os.makedirs(os.path.join(out_dir, temporary_name("export")), exist_ok=False)


def test_own_temporaries_follow_the_writers_convention_and_are_cleaned_once_their_process_is_gone(
    tmp_path: Path,
) -> None:
    name = temporary_name("export")
    assert (
        is_temporary_file(name)
        and name.startswith(".export.tmp-")
        and name != temporary_name("export")
    )
    process = torch.multiprocessing.get_context("fork").Process(
        target=_make_temporary_directory, args=(str(tmp_path),)
    )
    process.start()
    process.join()
    (dead,) = os.listdir(tmp_path)
    assert is_temporary_file(dead) and f"-{process.pid}-" in dead
    (tmp_path / dead / "part-0").write_bytes(b"half written")
    live = tmp_path / temporary_name("export")  # this process's: still being written
    live.write_bytes(b"in progress")
    assert remove_stale_temporaries(LocalFileSystem(), str(tmp_path)) == [str(tmp_path / dead)]
    assert os.listdir(tmp_path) == [live.name]
    assert remove_stale_temporaries(LocalFileSystem(), str(tmp_path / "missing")) == []
