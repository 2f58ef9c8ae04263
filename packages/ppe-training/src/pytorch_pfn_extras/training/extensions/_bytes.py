"""The writer ``savefun`` of extensions that encode their files themselves."""

from __future__ import annotations

from typing import IO, Any


def write_bytes(data: bytes, fileobj: IO[bytes], **kwargs: Any) -> None:
    """A writer ``savefun`` that writes ``data`` (bytes) as they are."""
    fileobj.write(data)
