"""Writer.write_in_place: appends and overwrites that cost the size of the data only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras.writing import SimpleWriter, ThreadWriter


def test_write_in_place_appends_overwrites_and_cuts_the_tail(tmp_path: Path) -> None:
    writer = SimpleWriter()
    seen: list[str] = []
    writer.add_post_save_hook(seen.append)
    out = str(tmp_path / "sub")
    assert writer.write_in_place("log", out, b"one\n") == 4
    inode = (tmp_path / "sub" / "log").stat().st_ino
    assert writer.write_in_place("log", out, b"two\n") == 8
    assert writer.write_in_place("log", out, b"TWO", offset=4) == 7  # cut what follows
    assert (tmp_path / "sub" / "log").read_bytes() == b"one\nTWO"
    assert (tmp_path / "sub" / "log").stat().st_ino == inode
    assert seen == [os.path.join(out, "log")] * 3


def test_only_the_plain_local_simple_writer_writes_in_place(tmp_path: Path) -> None:
    class Custom(SimpleWriter):
        def __call__(self, *args: Any, **kwargs: Any) -> None:
            super().__call__(*args, **kwargs)

    assert SimpleWriter().writes_in_place
    for writer in (Custom(), ThreadWriter()):
        assert not writer.writes_in_place
        with pytest.raises(TypeError, match="does not write in place"):
            writer.write_in_place("log", str(tmp_path), b"x")


def _bytes_written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io (Linux)")
def test_simple_writer_append_writes_only_the_new_bytes(tmp_path: Path) -> None:
    writer = SimpleWriter(savefun=lambda data, f: f.write(data))
    path = tmp_path / "log"
    writer("log", str(tmp_path), b"x" * (1 << 20))  # a large file: copying it would show
    inode = path.stat().st_ino
    record = b"0123456789" * 10 + b"\n"
    for _ in range(20):
        before = _bytes_written()
        writer("log", str(tmp_path), record, append=True)
        assert _bytes_written() - before == len(record)
    assert path.stat().st_ino == inode  # appended to, not replaced by a copy
    # Earlier bytes are never rewritten: a mark made in place survives later appends.
    with open(path, "r+b") as f:
        f.write(b"MARK")
    writer("log", str(tmp_path), record, append=True)
    assert path.read_bytes() == b"MARK" + b"x" * ((1 << 20) - 4) + record * 21
    assert os.listdir(tmp_path) == ["log"]


def test_other_writers_append_by_an_atomic_copy(tmp_path: Path) -> None:
    class Custom(SimpleWriter):
        def __call__(self, *args: Any, **kwargs: Any) -> None:
            super().__call__(*args, **kwargs)

    for writer in (Custom(savefun=lambda d, f: f.write(d)), ThreadWriter(lambda d, f: f.write(d))):
        path = tmp_path / type(writer).__name__
        with writer:
            writer(path.name, str(tmp_path), b"1\n")
        inode = path.stat().st_ino
        with writer:
            writer(path.name, str(tmp_path), b"2\n", append=True)
        assert path.read_bytes() == b"1\n2\n"
        assert path.stat().st_ino != inode  # a new file renamed over the old one
