"""Leases: a writer shows, on the file system itself, that its temporary is still in use.

While a temporary is written, :func:`hold_lease` keeps a small file next to it (its name
followed by ``.lease-{period in ms}``) and rewrites it every ``period`` seconds from a
background thread (one for the process).
The cleanup of any host (:func:`~pytorch_pfn_extras.writing.remove_stale_temporaries`) tells
an abandoned temporary from a live one by the age of that lease, measured on the file
system's own clock: the modification time of a probe it writes into the same directory. The
clocks of the hosts sharing the directory (an NFS mount, a bucket) need not agree.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._names import lease_path, parse_temporary_name, temporary_name

__all__ = ["DEFAULT_LEASE_PERIOD", "EXPIRY_PERIODS", "LeaseClock", "hold_lease"]

DEFAULT_LEASE_PERIOD = 15.0
"""Seconds between two refreshes of a lease by :func:`hold_lease`."""

EXPIRY_PERIODS = 4
"""A lease not refreshed for this many of its periods is expired."""

# Modification times of S3 objects (HTTP dates) have a resolution of one second: a lease
# expires that much later than EXPIRY_PERIODS says, so that rounding never shortens it.
_MTIME_RESOLUTION = 1.0
_IDLE_EXIT = 60.0  # seconds without leases after which the refreshing thread ends


@functools.lru_cache(maxsize=8)
def _content(period: float, pid: int) -> bytes:
    # For people only (who holds it): the name says the period, the mtime the age.
    record = {"period": period, "host": socket.gethostname(), "pid": pid}
    return (json.dumps(record) + "\n").encode()


def _write(fs: FileSystem, path: str, content: bytes) -> None:
    with fs.open(path, "wb") as f:
        f.write(content)


def _discard(fs: FileSystem, path: str) -> None:
    try:
        fs.remove(path)
    except OSError:  # gone already, or for the next cleanup to remove once expired
        pass


def _check_period(period: Any) -> float:
    if (
        isinstance(period, bool)
        or not isinstance(period, (int, float))
        or not math.isfinite(period)
        or period < 0.001
    ):
        message = (
            f"hold_lease: period must be a number of seconds of at least 0.001, got {period!r}"
        )
        raise ValueError(message)
    return round(period * 1000) / 1000  # as the lease's name says it


class _Lease:
    """A lease being held: what to write where, how often, and when next."""

    def __init__(self, fs: FileSystem, path: str, content: bytes, period: float) -> None:
        self.fs = fs
        self.path = path
        self.content = content
        self.period = period
        self.due = time.monotonic() + period
        self.held = True
        self._io = threading.Lock()  # held while the lease is written
        self._warned = False

    def refresh(self) -> None:
        """Write the lease again (unless released); a failure is retried at the next period."""
        with self._io:
            if not self.held:
                return
            try:
                _write(self.fs, self.path, self.content)
            except Exception as error:
                if not self._warned:
                    self._warned = True
                    message = (
                        f"could not refresh the lease {self.path!r} ({error!r}); retrying "
                        f"every {self.period} s. Other hosts remove the temporary it guards "
                        f"if it is not refreshed for {EXPIRY_PERIODS * self.period} s"
                    )
                    warnings.warn(message, RuntimeWarning, stacklevel=1)

    def release(self) -> None:
        """Stop refreshing; once this returns the lease is never written again."""
        with self._io:  # waits for a refresh in progress
            self.held = False


class _Keeper:
    """The thread that refreshes every lease of the process, started at the first one.

    One thread for all leases, kept between writes: a write pays no thread start (a
    ``threading.Thread`` start and join costs about as much as the lease file itself;
    ``benchmarks/writer_lease.py``). It is woken only when a new lease is due before its
    next refresh of others (the first one after an idle spell), ends after
    ``_IDLE_EXIT`` seconds without leases, and is forgotten in a forked child, which
    starts its own when needed.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._leases: set[_Lease] = set()
        self._wake_at = math.inf  # when the thread wakes next; -inf while it refreshes
        self._thread: threading.Thread | None = None

    def add(self, lease: _Lease) -> None:
        """Refresh ``lease`` every ``lease.period`` from now on."""
        with self._cond:
            self._leases.add(lease)
            if self._thread is None:
                _register_fork_hook()
                self._thread = threading.Thread(
                    target=self._run, name="ppe-lease-keeper", daemon=True
                )
                self._thread.start()
            elif lease.due < self._wake_at:
                self._cond.notify()

    def discard(self, lease: _Lease) -> None:
        """Stop refreshing ``lease``; once this returns it is never written again."""
        with self._cond:
            self._leases.discard(lease)
        lease.release()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [lease for lease in self._leases if lease.due <= now]
                while not due:
                    if not self._leases:
                        self._wake_at = math.inf
                        if not self._cond.wait(_IDLE_EXIT) and not self._leases:
                            self._thread = None  # the next lease starts another
                            return
                    else:
                        self._wake_at = min(lease.due for lease in self._leases)
                        self._cond.wait(self._wake_at - now)
                    now = time.monotonic()
                    due = [lease for lease in self._leases if lease.due <= now]
                self._wake_at = -math.inf
                for lease in due:
                    lease.due = now + lease.period
            for lease in due:  # outside the lock: a slow store delays no write
                lease.refresh()


_keeper = _Keeper()
_fork_hook: list[bool] = []  # registered (forked children inherit the registration)


def _forget_keeper() -> None:
    # In a forked child: the parent's thread is not there, and its locks may be held.
    global _keeper
    _keeper = _Keeper()


def _register_fork_hook() -> None:
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_keeper)
        _fork_hook.append(True)


@contextlib.contextmanager
def hold_lease(
    fs: FileSystem, temporary: str, *, period: float = DEFAULT_LEASE_PERIOD
) -> Iterator[str]:
    """Show other hosts that the temporary file or directory ``temporary`` is being written.

    On entry, a lease (``temporary`` followed by ``.lease-{period in ms}``) is written
    next to ``temporary``; a background thread rewrites it every ``period`` seconds; on
    exit it is no longer rewritten, and is removed. Wrap the whole life of a temporary in
    it, from before its creation until after its rename (or removal), so that it never
    exists without its lease. Writers do this for every write; code that writes a temporary of
    its own (a snapshot written as a directory of shards, a file of another library)
    does it with this context manager.

    :func:`remove_stale_temporaries`, on any host, removes a temporary whose lease has not
    been refreshed for ``4 * period`` seconds (plus one second of timestamp resolution),
    measured on the file system's clock, then its lease. A live writer's temporary is never
    removed while its lease is refreshed; a temporary without a lease, from another host,
    is never removed. A process stalled for longer than that (or cut off from the file
    system) may find its temporary gone: its rename then fails, loudly.

    Costs: one small file written at entry and removed at exit (two requests on object
    storage), and one small write per ``period`` for longer writes, from one thread that
    refreshes all the leases of the process.

    Args:
        fs: The file system of ``temporary`` (a writer's ``fs``).
        temporary: The path of the temporary, named by :func:`temporary_name`; it need not
            exist yet. Its directory is created if missing.
        period: Seconds between two refreshes of the lease (whole milliseconds).

    Yields:
        The path of the lease.

    Raises:
        ValueError: ``temporary`` is not named by :func:`temporary_name`, or ``period`` is
            not a number of at least 0.001.
        OSError: The lease cannot be written (nothing is left behind).

    Example:
        >>> fs = writing.LocalFileSystem()
        >>> partial = os.path.join("exports", writing.temporary_name("shards"))
        >>> with writing.hold_lease(fs, partial):
        ...     write_shards(partial)  # however long it takes
        ...     fs.rename(partial, os.path.join("exports", "shards"))
    """
    parsed = parse_temporary_name(os.path.basename(temporary))
    if parsed is None or parsed.lease_period is not None:
        message = (
            "hold_lease needs the path of a temporary named by temporary_name(), "
            f"such as 'out/.snapshot.tmp-0123abcd-42-deadbeef', got {temporary!r}"
        )
        raise ValueError(message)
    seconds = _check_period(period)
    path = lease_path(temporary, seconds)
    content = _content(seconds, os.getpid())
    try:
        try:
            _write(fs, path, content)
        except FileNotFoundError:
            directory = os.path.dirname(path)
            if not directory:
                raise
            fs.makedirs(directory, exist_ok=True)
            _write(fs, path, content)
    except BaseException:
        _discard(fs, path)  # nothing is left behind
        raise
    lease = _Lease(fs, path, content, seconds)
    keeper = _keeper
    keeper.add(lease)
    try:
        yield path
    finally:
        keeper.discard(lease)
        _discard(fs, path)


class LeaseClock:
    """How long the leases in one directory have left, on the clock of its file system.

    "Now" is the modification time of a probe (a lease-like file) written into the
    directory at the first question, then removed; a lease's age is "now" minus its own
    modification time. Both are stamped by the same file system (the NFS server, the
    object store), so the clocks of hosts need not agree. A file system without a
    ``modified(path)`` method has no clock: no lease can be judged.

    Args:
        fs: The file system.
        directory: The directory of the leases.
    """

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self._fs = fs
        self._directory = directory
        modified = getattr(fs, "modified", None)
        self._modified: Callable[[str], float] | None = modified if callable(modified) else None
        self._now: float | None = None
        self._measured = False

    def remaining(self, lease: str, period: float) -> float | None:
        """Seconds before ``lease``, refreshed every ``period``, expires (negative: expired).

        Returns:
            ``None`` when it cannot tell: no clock, or the lease is gone (its write is
            over) or cannot be read.
        """
        now = self._file_system_now()
        if now is None or self._modified is None:
            return None
        try:
            # Opening revalidates the attributes an NFS client caches (close-to-open).
            with self._fs.open(lease, "rb"):
                pass
            modified = float(self._modified(lease))
        except Exception:  # any failure to read it: keep what it guards
            return None
        return EXPIRY_PERIODS * period + _MTIME_RESOLUTION - (now - modified)

    def _file_system_now(self) -> float | None:
        if not self._measured:
            self._measured = True
            self._now = self._probe()
        return self._now

    def _probe(self) -> float | None:
        if self._modified is None:
            return None
        # A lease of no temporary: left behind by a kill, it expires and is removed.
        probe = os.path.join(self._directory, temporary_name("ppe-clock"))
        probe = lease_path(probe, DEFAULT_LEASE_PERIOD)
        try:
            _write(self._fs, probe, _content(DEFAULT_LEASE_PERIOD, os.getpid()))
            try:
                return float(self._modified(probe))
            finally:
                _discard(self._fs, probe)
        except Exception:  # no clock: no lease can be judged, nothing is removed
            return None
