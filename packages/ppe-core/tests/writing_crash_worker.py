"""Subprocess target of ``test_writing_crash.py``: forks writer processes on demand.

It imports torch once, then serves commands read from stdin, one per line:

``run MODE OUT_DIR START COUNT [STOP]``
    Fork a child that writes versions ``START`` to ``START + COUNT - 1`` of a large,
    verifiable target through ``SimpleWriter``. Prints ``pid PID``; the child prints
    ``begin V`` before and ``done V`` after each write; when the child has ended,
    prints ``exit PID STATUS`` (negative: killed by signal). ``STOP`` puts a fault at
    a known point of the last write:

    ``chunk:K``
        Once the savefun has written (and flushed) ``K`` of its ``CHUNKS`` chunks, the
        child prints ``stopped V chunk:K`` and waits there for the test to SIGKILL it.
    ``returned``
        Once the writer has returned, before ``done V``: ``stopped V returned``, and the
        same wait.
    ``byte:K``
        The file may grow by ``K`` bytes only (``RLIMIT_FSIZE``): the kernel cuts the
        write there and kills the child with ``SIGXFSZ``, in the middle of the
        ``write`` call (MODE ``append`` only, whose data is one ``O_APPEND`` write).

``quit``
    Exit.

MODE ``replace`` saves ``{"version": V, "data": tensor, "sha": ...}`` with
``torch.save`` into ``snapshot.pt``; MODE ``append`` appends the line
``"V SHA PAYLOAD\\n"`` to ``log.txt``. The savefun writes in chunks, flushing each:
into the temporary file of ``replace``, and into the memory buffer whose bytes
``append`` then adds to the file with one ``write``.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import os
import random
import resource
import signal
import sys
from functools import partial
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


def replace_target(version: int, payload: tuple[torch.Tensor, str]) -> dict[str, Any]:
    """What MODE ``replace`` saves as ``version``; ``payload``: the tensor and its sha."""
    data, sha = payload
    return {"version": version, "data": data, "sha": sha}


def serialized(target: Any) -> bytes:
    """The bytes ``chunked_torch_save`` writes for ``target`` (torch.save's, deterministic)."""
    buffer = io.BytesIO()
    torch.save(target, buffer)
    return buffer.getvalue()


def chunk_bytes(total: int) -> int:
    """The size of each chunk (the last one may be shorter) of ``total`` bytes."""
    return -(-total // CHUNKS)


def _wait_to_be_killed(version: int, point: str) -> None:
    """Say where the child stands, then wait there for the test to SIGKILL it."""
    _say(f"stopped {version} {point}")
    os.read(0, 1)  # returns only if the test went away (its end of stdin closed)
    message = f"stdin closed while stopped at {point} of version {version}"
    raise SystemExit(message)


Stop = tuple[int, int]  # (version, K): wait to be killed once K chunks are written


def _write_in_chunks(data: bytes, fileobj: IO[bytes], stop: Stop | None) -> None:
    step = chunk_bytes(len(data))
    written = 0
    for start in range(0, len(data), step):
        if stop is not None and written == stop[1]:
            _wait_to_be_killed(stop[0], f"chunk:{written}")
        fileobj.write(data[start : start + step])
        fileobj.flush()
        written += 1
    if stop is not None and written == stop[1]:
        _wait_to_be_killed(stop[0], f"chunk:{written}")


def chunked_torch_save(target: Any, fileobj: IO[bytes], stop: Stop | None = None) -> None:
    _write_in_chunks(serialized(target), fileobj, stop)


def write_bytes(data: bytes, fileobj: IO[bytes], stop: Stop | None = None) -> None:
    _write_in_chunks(data, fileobj, stop)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _limit_growth(path: str, extra: int) -> None:
    """Let ``path`` grow by ``extra`` bytes; a write past that kills the process (SIGXFSZ)."""
    size = os.path.getsize(path) if os.path.exists(path) else 0
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + extra, hard))
    # No core file for that death: not dumpable (PR_SET_DUMPABLE is 4), no core size.
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: EFBIG instead


def child(mode: str, out_dir: str, start: int, count: int, stop: str, payloads: list[Any]) -> None:
    writer = SimpleWriter()
    last = start + count - 1
    point, _, amount = stop.partition(":")
    for version in range(start, last + 1):
        _say(f"begin {version}")
        chunks = (version, int(amount)) if version == last and point == "chunk" else None
        if version == last and point == "byte":
            _limit_growth(os.path.join(out_dir, APPEND_FILE), int(amount))
        if mode == "replace":
            target = replace_target(version, payloads[version % 2])
            writer(REPLACE_FILE, out_dir, target, savefun=partial(chunked_torch_save, stop=chunks))
        else:
            data = record(version)
            writer(
                APPEND_FILE, out_dir, data, savefun=partial(write_bytes, stop=chunks), append=True
            )
        if version == last and point == "returned":
            _wait_to_be_killed(version, "returned")
        if version == last and stop:
            message = f"version {version} was written without reaching the stop {stop!r}"
            raise RuntimeError(message)
        _say(f"done {version}")


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
        stop = words[5] if len(words) > 5 else ""
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(mode, out_dir, start, count, stop, payloads)
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
