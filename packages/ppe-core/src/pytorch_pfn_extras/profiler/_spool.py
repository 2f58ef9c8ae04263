"""A channel from child processes to the process that created an object: JSON lines in files.

A :class:`Spool` names a directory; a process other than its owner (forked, or given a pickled
copy) appends each message to a file there with one write; each thread of a process has a file
of its own (``<pid>-<random>.jsonl``), and the owner reads the complete lines back. No lock, thread or pipe is
involved, so a copy inherited by ``fork`` while another thread was sending still works, and so
does a copy sent to a ``spawn``ed process by any means (``Process`` arguments, ``Pool.map``, a
DataLoader's dataset).

The disk used stays bounded over long runs: a sender starts a new file after ``_ROTATE_BYTES``,
ending the old one with a ``null`` line, and the owner deletes a file once it has read it to
that line, or to its end when the sending process has exited.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from typing import Any

# A sender starts a new file once it has written this many bytes to one.
_ROTATE_BYTES = 1 << 20
_END = b"null"  # the last line of a file that its sender has left for a new one

# os.getpid() is a system call (~0.3 us here) and the owner check is on every report's path;
# the pid is cached and refreshed in forked children.
_pid = os.getpid()


def _refresh_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


def current_pid() -> int:
    """Return ``os.getpid()``, cached."""
    return _pid


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


def _remove(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)


class _SenderFile(threading.local):
    """The file that the calling thread sends messages to."""

    def __init__(self) -> None:
        self.fd = -1
        self.pid = -1  # the process that opened ``fd``
        self.written = 0

    def open(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{_pid}-{uuid.uuid4().hex}.jsonl")
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        self.pid = _pid
        self.written = 0

    def close(self) -> None:
        os.write(self.fd, _END + b"\n")
        os.close(self.fd)


class Spool:
    """Messages from other processes to the owner (the process that created the spool).

    Args:
        prefix: Start of the directory's name, in the system's temporary directory.
    """

    def __init__(self, prefix: str) -> None:
        self.owner_pid = current_pid()
        name = f"{prefix}-{self.owner_pid}-{uuid.uuid4().hex}"
        self.path = os.path.join(tempfile.gettempdir(), name)
        self._setup_local_state()
        weakref.finalize(self, _remove, self.path, self.owner_pid)

    def _setup_local_state(self) -> None:
        self._offsets: dict[str, int] = {}
        self._collect_lock = threading.Lock()
        self._file = _SenderFile()

    def __getstate__(self) -> dict[str, Any]:
        return {"owner_pid": self.owner_pid, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.owner_pid = state["owner_pid"]
        self.path = state["path"]
        self._setup_local_state()

    def is_owner(self) -> bool:
        """Whether the calling process created the spool."""
        return _pid == self.owner_pid

    def send(self, message: Any) -> None:
        """Send a JSON-serializable message to the owner (from another process)."""
        data = (json.dumps(message, default=repr) + "\n").encode("utf-8")
        file = self._file
        if file.pid != _pid:  # the first message of this thread, or a copy inherited by fork
            file.open(self.path)
        elif file.written >= _ROTATE_BYTES:
            file.close()
            file.open(self.path)
        os.write(file.fd, data)
        file.written += len(data)

    def close(self) -> None:
        """End the calling thread's file of messages (a later :meth:`send` opens another)."""
        if self._file.pid == _pid:
            self._file.close()
        self._file.pid = -1

    def collect(self) -> list[Any]:
        """Return the messages received since the previous call (in the owner; else ``[]``).

        A message whose line is still being written is left for the next call.
        """
        if not self.is_owner() or not os.path.isdir(self.path):
            return []
        messages: list[Any] = []
        with self._collect_lock:
            for entry in sorted(os.listdir(self.path)):
                messages.extend(self._read(entry))
        return messages

    def _read(self, entry: str) -> list[Any]:
        path = os.path.join(self.path, entry)
        exited = _exited(int(entry.split("-", 1)[0]))  # before reading: then nothing follows
        offset = self._offsets.get(entry, 0)
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        lines = data[:end].splitlines()
        done = (bool(lines) and lines[-1] == _END) or (exited and end == len(data))
        if done:
            os.remove(path)
            self._offsets.pop(entry, None)
        else:
            self._offsets[entry] = offset + end
        return [json.loads(line) for line in lines if line and line != _END]
