"""Writers on pfio and fsspec file systems: S3 (a real local moto server) and local disks.

The ``s3_server`` fixture (root conftest.py) skips these tests without moto[server], pfio
and s3fs: ``pip install 'ppe-core[s3]' 'moto[server]'``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from pytorch_pfn_extras import writing

pytest.importorskip("pfio", reason="needs pfio: pip install 'ppe-core[s3]'")
pytest.importorskip("s3fs", reason="needs s3fs: pip install 'ppe-core[s3]'")

import boto3  # pfio brings boto3
import fsspec  # s3fs brings fsspec
import pfio

TEMP_RE = re.compile(
    r"^\.(?P<base>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<rand>[0-9a-f]{8})$"
)


def write_bytes(data: bytes, fileobj: IO[bytes]) -> None:
    fileobj.write(data)


@dataclass
class Store:
    """A user's file system object and where a writer writes into it."""

    fs: Any  # what the user passes as ``fs=``
    out_dir: str  # the writer's out_dir, in the paths of ``fs``
    bucket: str
    key_prefix: str  # the S3 key of ``out_dir``, with a trailing "/"
    adapter: type

    def read(self, name: str) -> bytes:
        """The content of ``out_dir/name``, read through the user's own object."""
        if isinstance(self.fs, fsspec.AbstractFileSystem):
            self.fs.invalidate_cache()  # its listings may predate other writers' objects
        with self.fs.open(f"{self.out_dir}/{name}", "rb") as f:
            return f.read()  # type: ignore[no-any-return]


@pytest.fixture(params=["pfio", "s3fs"])
def store(request: pytest.FixtureRequest, s3_server: Any) -> Store:
    bucket = s3_server.new_bucket()
    if request.param == "pfio":
        fs = s3_server.pfio(f"s3://{bucket}/run")
        return Store(fs, "out", bucket, "run/out/", writing.PfioFileSystem)
    return Store(
        s3_server.s3fs(), f"{bucket}/run/out", bucket, "run/out/", writing.FsspecFileSystem
    )


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture(scope="module")
def temporary_name_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], str]:
    """``name_of(base, pid)``: a temporary name as this host's writers make them, for ``pid``."""
    seen: list[str] = []

    def record(data: bytes, fileobj: IO[bytes]) -> None:
        seen.append(os.path.basename(fileobj.name))
        fileobj.write(data)

    writing.SimpleWriter(savefun=record)("probe", str(tmp_path_factory.mktemp("probe")), b"")
    match = TEMP_RE.match(seen[0])
    assert match is not None and match["base"] == "probe", seen

    def name_of(base: str, pid: int) -> str:
        return f".{base}.tmp-{match['host']}-{pid}-{match['rand']}"

    return name_of


# ---------------------------------------------------------------- S3: pfio and s3fs


def test_simple_writer_writes_one_object_to_s3(store: Store, s3_server: Any) -> None:
    writer = writing.SimpleWriter(fs=store.fs)
    assert isinstance(writer.fs, store.adapter)
    assert writer.fs.wrapped is store.fs  # type: ignore[attr-defined]
    state = {"w": torch.arange(4.0), "step": 7}
    writer("snapshot_x", store.out_dir, state)
    assert s3_server.objects(store.bucket) == [store.key_prefix + "snapshot_x"]
    loaded = torch.load(io.BytesIO(store.read("snapshot_x")))
    assert loaded["step"] == 7 and torch.equal(loaded["w"], state["w"])


def test_simple_writer_appends_on_s3(store: Store, s3_server: Any) -> None:
    writer = writing.SimpleWriter(savefun=write_bytes, fs=store.fs)
    writer("log.jsonl", store.out_dir, b'{"i": 1}\n', append=True)
    writer("log.jsonl", store.out_dir, b'{"i": 2}\n', append=True)
    assert store.read("log.jsonl") == b'{"i": 1}\n{"i": 2}\n'
    assert s3_server.objects(store.bucket) == [store.key_prefix + "log.jsonl"]


def test_thread_writer_writes_to_s3_by_finalize(store: Store, s3_server: Any) -> None:
    writer = writing.ThreadWriter(fs=store.fs)
    writer("snapshot_1", store.out_dir, {"w": torch.ones(3)})
    writer("snapshot_2", store.out_dir, {"w": torch.zeros(3)})
    writer.finalize()
    assert s3_server.objects(store.bucket) == [
        store.key_prefix + "snapshot_1",
        store.key_prefix + "snapshot_2",
    ]
    assert torch.equal(torch.load(io.BytesIO(store.read("snapshot_2")))["w"], torch.zeros(3))


# Python 3.12 warns when a process with threads (the moto server's, s3fs's loop) forks; the
# worker uses none of them.
@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork\\(\\) may lead to deadlocks"
)
@pytest.mark.parametrize("mp_context", ["fork", "spawn"])
def test_process_writer_writes_to_s3(store: Store, s3_server: Any, mp_context: str) -> None:
    # pfio reconnects in a new process; an s3fs instance is not fork-safe, so the adapter
    # makes a new one there.
    writer = writing.ProcessWriter(fs=store.fs, mp_context=mp_context)
    writer("snapshot_p", store.out_dir, {"w": torch.arange(5)})
    writer.finalize()
    assert s3_server.objects(store.bucket) == [store.key_prefix + "snapshot_p"]
    assert torch.equal(torch.load(io.BytesIO(store.read("snapshot_p")))["w"], torch.arange(5))
    # The parent's file system sees what the worker wrote.
    assert writer.fs.exists(f"{store.out_dir}/snapshot_p")
    assert writer.fs.listdir(store.out_dir) == ["snapshot_p"]


def test_stale_temporaries_on_s3_are_removed_live_ones_kept(
    store: Store, s3_server: Any, temporary_name_of: Callable[[str, int], str]
) -> None:
    dead = temporary_name_of("snapshot_x", _dead_pid())
    live = temporary_name_of("snapshot_x", os.getppid())
    dead_dir = temporary_name_of("snapshot_dir", _dead_pid())  # a snapshot written as a folder
    writer = writing.SimpleWriter(savefun=write_bytes, fs=store.fs)
    for path in (dead, live, f"{dead_dir}/model.pt", f"{dead_dir}/sub/optimizer.pt"):
        with writer.fs.open(f"{store.out_dir}/{path}", "wb") as f:
            f.write(b"partial")
    writer("snapshot_x", store.out_dir, b"complete")
    # A writer removes stale temporary files; directories are their owners' (a sharded
    # snapshot recovers from one first), removed by the cleanup itself.
    folder = [
        f"{store.key_prefix}{dead_dir}/model.pt",
        f"{store.key_prefix}{dead_dir}/sub/optimizer.pt",
    ]
    assert s3_server.objects(store.bucket) == sorted(
        [store.key_prefix + "snapshot_x", store.key_prefix + live, *folder]
    )
    assert writing.remove_stale_temporaries(writer.fs, store.out_dir) == [
        f"{store.out_dir}/{dead_dir}"
    ]
    assert s3_server.objects(store.bucket) == sorted(
        [store.key_prefix + "snapshot_x", store.key_prefix + live]
    )
    assert store.read("snapshot_x") == b"complete"


def test_listings_see_objects_written_through_another_client(
    s3_server: Any,
) -> None:
    bucket = s3_server.new_bucket()
    out = f"{bucket}/out"
    first = writing.SimpleWriter(savefun=write_bytes, fs=s3_server.s3fs())
    first("a", out, b"a")
    assert first.fs.listdir(out) == ["a"]  # s3fs caches this listing
    other = writing.SimpleWriter(savefun=write_bytes, fs=s3_server.s3fs())
    other("b", out, b"b")
    other("log", out, b"1", append=True)
    assert sorted(first.fs.listdir(out)) == ["a", "b", "log"]
    assert first.fs.exists(f"{out}/b") and first.fs.size(f"{out}/b") == 1
    first("log", out, b"2", append=True)  # appends to what the other client wrote
    with first.fs.open(f"{out}/log", "rb") as f:
        assert f.read() == b"12"


def test_listdir_on_s3_names_each_entry_once(store: Store, s3_server: Any) -> None:
    # A folder marker "out/" (made by other tools), an object "x" and objects under "x/".
    client = boto3.client("s3", endpoint_url=s3_server.endpoint)
    for key in ("", "x", "x/y", "z/", "z/w"):
        client.put_object(Bucket=store.bucket, Key=store.key_prefix + key, Body=b"")
    fs = writing.SimpleWriter(fs=store.fs).fs
    assert sorted(fs.listdir(store.out_dir)) == ["x", "z"]
    assert fs.listdir(f"{store.out_dir}/z") == ["w"]


# ---------------------------------------------------------------- local pfio and fsspec


def test_pfio_local_file_system_writes_under_its_directory(tmp_path: Path) -> None:
    fs = pfio.v2.from_url(str(tmp_path))
    writer = writing.SimpleWriter(savefun=write_bytes, fs=fs)
    assert isinstance(writer.fs, writing.PfioFileSystem) and writer.fs.wrapped is fs
    writer("snapshot", "out", b"data")
    writer("log", "out/sub", b"1", append=True)
    writer("log", "out/sub", b"2", append=True)
    assert (tmp_path / "out" / "snapshot").read_bytes() == b"data"
    assert (tmp_path / "out" / "sub" / "log").read_bytes() == b"12"
    assert sorted(os.listdir(tmp_path / "out")) == ["snapshot", "sub"]


def test_fsspec_local_file_system_writes_like_the_local_one(tmp_path: Path) -> None:
    fs = fsspec.filesystem("file")
    writer = writing.SimpleWriter(fs=fs)
    assert isinstance(writer.fs, writing.FsspecFileSystem) and writer.fs.wrapped is fs
    out = str(tmp_path / "out")
    writer("snapshot", out, {"w": torch.arange(2)})
    writer("log", out, b"1", savefun=write_bytes, append=True)
    writer("log", out, b"2", savefun=write_bytes, append=True)
    assert torch.equal(torch.load(tmp_path / "out" / "snapshot")["w"], torch.arange(2))
    assert (tmp_path / "out" / "log").read_bytes() == b"12"
    assert sorted(os.listdir(out)) == ["log", "snapshot"]


def test_fsspec_memory_file_system_is_written_through_its_api() -> None:
    fs = fsspec.filesystem("memory")
    writer = writing.ThreadQueueWriter(savefun=write_bytes, fs=fs)
    writer("log", "/ppe-memory-test/out", b"1", append=True)
    writer("log", "/ppe-memory-test/out", b"2", append=True)
    writer.finalize()
    try:
        assert fs.cat_file("/ppe-memory-test/out/log") == b"12"
        assert writer.fs.listdir("/ppe-memory-test/out") == ["log"]
    finally:
        fs.rm("/ppe-memory-test", recursive=True)


# ---------------------------------------------------------------- what is accepted


def test_an_object_without_the_file_system_api_is_a_type_error() -> None:
    class HalfFileSystem:
        def open(self, path: str, mode: str = "rb") -> IO[Any]:
            return open(path, mode)

        def exists(self, path: str) -> bool:
            return os.path.exists(path)

        def __repr__(self) -> str:
            return "HalfFileSystem()"

    with pytest.raises(TypeError) as info:
        writing.SimpleWriter(fs=HalfFileSystem())
    message = str(info.value)
    assert message.startswith("SimpleWriter: fs must provide open, exists, makedirs, rename")
    assert "HalfFileSystem() lacks makedirs, rename, remove, listdir" in message
    assert "pfio file system" in message and "fsspec" in message


def test_file_systems_with_the_api_are_used_as_given(tmp_path: Path) -> None:
    local = writing.LocalFileSystem()
    assert writing.SimpleWriter(fs=local).fs is local
    adapter = writing.SimpleWriter(fs=pfio.v2.from_url(str(tmp_path))).fs
    assert writing.ThreadWriter(fs=adapter).fs is adapter  # an adapter is not wrapped again
    assert writing.adapt_file_system(None, "me") == writing.LocalFileSystem()
    assert repr(adapter) == f"PfioFileSystem({adapter.wrapped!r})"  # type: ignore[attr-defined]


def test_an_adapter_delegates_what_it_lacks_to_the_wrapped_object(tmp_path: Path) -> None:
    fs = pfio.v2.from_url(str(tmp_path))
    adapter = writing.SimpleWriter(fs=fs).fs
    assert adapter.cwd == fs.cwd  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no_such_method"):
        adapter.no_such_method  # type: ignore[attr-defined]  # noqa: B018


# ---------------------------------------------------------------- isdir, size, remove_tree


@dataclass
class Adapted:
    fs: Any  # writer.fs
    root: str  # a directory of it to work in
    local_root: str | None
    local_dir: Path | None = None  # where ``root`` is on the local disk


@pytest.fixture(params=["local", "pfio-local", "fsspec-local", "pfio-s3", "s3fs"])
def adapted(request: pytest.FixtureRequest, tmp_path: Path) -> Adapted:
    kind = request.param
    if kind == "local":
        return Adapted(writing.SimpleWriter().fs, str(tmp_path), "", tmp_path)
    if kind == "pfio-local":
        fs = writing.SimpleWriter(fs=pfio.v2.from_url(str(tmp_path))).fs
        return Adapted(fs, "work", str(tmp_path), tmp_path / "work")
    if kind == "fsspec-local":
        fs = writing.SimpleWriter(fs=fsspec.filesystem("file")).fs
        return Adapted(fs, str(tmp_path), "", tmp_path)
    s3_server = request.getfixturevalue("s3_server")
    bucket = s3_server.new_bucket()
    if kind == "pfio-s3":
        fs = writing.SimpleWriter(fs=s3_server.pfio(f"s3://{bucket}/run")).fs
        return Adapted(fs, "work", None)
    return Adapted(writing.SimpleWriter(fs=s3_server.s3fs()).fs, f"{bucket}/work", None)


def _make_tree(adapted: Adapted) -> str:
    tree = f"{adapted.root}/tree"
    adapted.fs.makedirs(f"{tree}/sub", exist_ok=True)
    for path, data in (("a.bin", b"12345"), ("sub/b.bin", b"")):
        with adapted.fs.open(f"{tree}/{path}", "wb") as f:
            f.write(data)
    return tree


def test_isdir_and_size_of_each_file_system(adapted: Adapted) -> None:
    tree = _make_tree(adapted)
    fs = adapted.fs
    assert fs.isdir(tree) and fs.isdir(f"{tree}/sub")
    assert not fs.isdir(f"{tree}/a.bin") and not fs.isdir(f"{tree}/missing")
    assert fs.size(f"{tree}/a.bin") == 5 and fs.size(f"{tree}/sub/b.bin") == 0
    with pytest.raises(FileNotFoundError):
        fs.size(f"{tree}/missing")
    assert sorted(fs.listdir(tree)) == ["a.bin", "sub"]


def test_remove_tree_of_each_file_system(adapted: Adapted) -> None:
    tree = _make_tree(adapted)
    with adapted.fs.open(f"{adapted.root}/kept", "wb") as f:
        f.write(b"k")
    adapted.fs.remove_tree(tree)
    assert not adapted.fs.exists(tree) and not adapted.fs.exists(f"{tree}/sub/b.bin")
    assert adapted.fs.listdir(adapted.root) == ["kept"]
    adapted.fs.remove_tree(tree)  # missing: nothing to do
    adapted.fs.remove_tree(f"{adapted.root}/never_there")
    for root in ("", "."):
        with pytest.raises(ValueError, match="remove_tree needs a directory below the root"):
            adapted.fs.remove_tree(root)
    if adapted.local_dir is not None:
        assert sorted(os.listdir(adapted.local_dir)) == ["kept"]


def test_local_root_tells_where_paths_are_on_the_local_disk(adapted: Adapted) -> None:
    assert adapted.fs.local_root == adapted.local_root
    if adapted.local_root is not None:
        tree = _make_tree(adapted)
        local = Path(adapted.local_root, tree)
        assert (local / "a.bin").read_bytes() == b"12345"


def test_remove_tree_removes_the_objects_under_folder_markers(s3_server: Any) -> None:
    # Tools such as the S3 console create empty "folder/" objects (pfio cannot remove those).
    bucket = s3_server.new_bucket()
    fs = writing.SimpleWriter(fs=s3_server.pfio(f"s3://{bucket}/run")).fs
    client = boto3.client("s3", endpoint_url=s3_server.endpoint)
    for key in ("run/tree/", "run/tree/sub/", "run/tree/sub/x", "run/kept"):
        client.put_object(Bucket=bucket, Key=key, Body=b"" if key.endswith("/") else b"x")
    assert sorted(fs.listdir("tree")) == ["sub"]
    fs.remove_tree("tree")
    assert [key for key in s3_server.objects(bucket) if not key.endswith("/")] == ["run/kept"]


# ---------------------------------------------------------------- stale temporary directories


class PlainFileSystem:
    """A user's file system with the required methods only (no isdir nor remove_tree)."""

    def open(self, path: str, mode: str = "rb") -> IO[Any]:
        return open(path, mode)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)


@pytest.mark.parametrize(
    "make_fs",
    [lambda root: None, lambda root: pfio.v2.from_url(root), lambda root: PlainFileSystem()],
    ids=["local", "pfio-local", "without-remove_tree"],
)
def test_stale_temporary_directories_are_removed_when_the_fs_can(
    tmp_path: Path,
    temporary_name_of: Callable[[str, int], str],
    make_fs: Callable[[str], Any],
) -> None:
    fs = make_fs(str(tmp_path))
    out = "out" if isinstance(fs, pfio.v2.fs.FS) else str(tmp_path / "out")
    dead = tmp_path / "out" / temporary_name_of("snapshot_9", _dead_pid())
    live = tmp_path / "out" / temporary_name_of("snapshot_9", os.getppid())
    dead_file = tmp_path / "out" / temporary_name_of("log", _dead_pid())
    for folder in (dead, live):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "model.pt").write_bytes(b"partial")
    dead_file.write_bytes(b"partial")
    writer = writing.SimpleWriter(savefun=write_bytes, fs=fs)
    writer("log", out, b"ok")  # the scan of out must not fail on the folders
    # A writer removes stale temporary files; directories are their owners' (a sharded
    # snapshot recovers from one first), removed by the cleanup itself when the fs can.
    assert set(os.listdir(tmp_path / "out")) == {"log", live.name, dead.name}
    writing.remove_stale_temporaries(writer.fs, out)
    expected = {"log", live.name} | ({dead.name} if isinstance(fs, PlainFileSystem) else set())
    assert set(os.listdir(tmp_path / "out")) == expected
    assert (tmp_path / "out" / "log").read_bytes() == b"ok"
