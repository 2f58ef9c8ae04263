"""Subprocess target of ``test_writing_crash.py``: forks writer processes on demand.

It imports torch once, then serves commands read from stdin, one per line:

``run MODE OUT_DIR START COUNT``
    Fork a child that writes versions ``START, START + 1, ...`` of a large,
    verifiable target through ``SimpleWriter`` (``COUNT`` writes, or forever when
    negative). Prints ``pid PID``; the child prints ``begin V`` before and
    ``done V`` after each write; when the child has ended (the test may SIGKILL
    it at any moment), prints ``exit PID STATUS`` (negative: killed by signal).

``quit``
    Exit.

MODE ``replace`` saves ``{"version": V, "data": tensor, "sha": ...}`` with
``torch.save`` into ``snapshot.pt``; MODE ``append`` appends the line
``"V SHA PAYLOAD\\n"`` to ``log.txt``. Both savefuns write in chunks and flush
after each, so that a kill often lands with a partial temporary file.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import sys
from typing import IO, Any

import torch

from pytorch_pfn_extras.writing import SimpleWriter

ELEMENTS = 1 << 19  # 2 MiB of float32 per snapshot
RECORD_BYTES = 16 << 10  # 32 KiB of hex per log record
CHUNKS = 16
REPLACE_FILE = "snapshot.pt"
APPEND_FILE = "log.txt"


def payload_tensor(version: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(version % 2)
    return torch.randn(ELEMENTS, generator=generator)


def tensor_sha(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.numpy().tobytes()).hexdigest()


def record(version: int) -> bytes:
    body = random.Random(version).randbytes(RECORD_BYTES).hex()
    sha = hashlib.sha256(body.encode()).hexdigest()
    return f"{version} {sha} {body}\n".encode()


def _write_in_chunks(data: bytes, fileobj: IO[bytes]) -> None:
    step = -(-len(data) // CHUNKS)
    for start in range(0, len(data), step):
        fileobj.write(data[start : start + step])
        fileobj.flush()


def chunked_torch_save(target: Any, fileobj: IO[bytes]) -> None:
    buffer = io.BytesIO()
    torch.save(target, buffer)
    _write_in_chunks(buffer.getvalue(), fileobj)


def write_bytes(data: bytes, fileobj: IO[bytes]) -> None:
    _write_in_chunks(data, fileobj)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def child(mode: str, out_dir: str, start: int, count: int, payloads: list[Any]) -> None:
    writer = SimpleWriter(savefun=chunked_torch_save)
    version = start
    while count < 0 or version < start + count:
        _say(f"begin {version}")
        if mode == "replace":
            data, sha = payloads[version % 2]
            target = {"version": version, "data": data, "sha": sha}
            writer(REPLACE_FILE, out_dir, target)
        else:
            writer(APPEND_FILE, out_dir, record(version), savefun=write_bytes, append=True)
        _say(f"done {version}")
        version += 1


def main() -> None:
    torch.set_num_threads(1)
    tensors = [payload_tensor(0), payload_tensor(1)]
    payloads = [(tensor, tensor_sha(tensor)) for tensor in tensors]
    _say("ready")
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            return
        mode, out_dir, start, count = words[1], words[2], int(words[3]), int(words[4])
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(mode, out_dir, start, count, payloads)
            except BaseException as exc:
                _say(f"error {exc!r}")
                code = 1
            finally:
                os._exit(code)
        _say(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        _say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
