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
