"""Removing the temporaries (and leases) that killed writers left behind, once provably abandoned."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

from pytorch_pfn_extras.writing._fs import FileSystem
from pytorch_pfn_extras.writing._lease import LeaseClock
from pytorch_pfn_extras.writing._names import host_tag, parse_temporary_name

__all__ = [
    "StaleScan",
    "remove_stale_temporaries",
    "scan_stale_temporaries",
    "stale_temporaries",
]


class StaleScan(NamedTuple):
    """What one cleanup of a directory did.

    Attributes:
        removed: The temporaries removed (``directory`` joined with each name).
        recheck_in: Seconds after which a temporary kept for its lease could have expired
            (the soonest of them); ``None`` when no kept temporary can expire so.
    """

    removed: list[str]
    recheck_in: float | None


@dataclass
class _Found:
    """A temporary seen in a listing: itself, its leases (one, normally), or both."""

    host: str
    pid: int
    temporary: bool = False
    leases: dict[str, float] = field(default_factory=dict)  # name: period


def _process_is_gone(pid: int) -> bool:
    if os.name != "posix":  # pragma: no cover -- no cheap liveness check; keep the file
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, owned by someone else
        return False
    return False


def remove_stale_temporaries(fs: FileSystem, directory: str) -> list[str]:
    """Remove the temporaries in ``directory`` that are provably abandoned.

    A temporary (see :func:`temporary_name`) is abandoned when

    - it was made on this host (and PID namespace) by a process that no longer exists, or
    - its lease (see :func:`hold_lease`) has not been refreshed for 4 of its periods,
      measured on the file system's clock (the modification time of a probe written into
      ``directory``; ``fs`` needs a ``modified(path)`` method, as
      :class:`LocalFileSystem` and the pfio and fsspec adapters have): this removes what a
      job killed on another host or pod left on a shared file system or bucket.

    Temporaries of this process, of live writers (whose leases are refreshed) and, from
    other hosts, those without a lease (written by older versions, or by code that does
    not use :func:`hold_lease`) are kept: they never disturb a write. A lease goes with
    its temporary; a lease left without one is removed on the same terms. Writers run
    this on their output directory; call it for a directory that only your own code
    writes into with :func:`temporary_name`.

    A stale temporary that is a directory (a snapshot written as a directory under a
    name from :func:`temporary_name`) is removed with ``fs.remove_tree`` when ``fs`` has
    it, and left alone otherwise; failing to remove one is not an error (the next scan
    tries again).

    Args:
        fs: The file system: a writer's ``fs``, or :class:`LocalFileSystem` for
            the local disk.
        directory: The directory to scan (``""`` for the current one); a
            missing directory has nothing to remove.

    Returns:
        The temporaries removed (``directory`` joined with each name); their leases
        are not listed.

    Example:
        >>> removed = writing.remove_stale_temporaries(writing.LocalFileSystem(), "exports")
    """
    return scan_stale_temporaries(fs, directory).removed


def stale_temporaries(fs: FileSystem, directory: str) -> list[str]:
    """The temporaries in ``directory`` that :func:`remove_stale_temporaries` would remove.

    Nothing is removed: code that may still need what a killed writer left (a
    committed snapshot renamed aside by a replacement that was killed half way) looks
    at these first.

    Args:
        fs: The file system.
        directory: The directory to scan (``""`` for the current one).

    Returns:
        Their paths (``directory`` joined with each name), files and directories.
    """
    abandoned, _recheck_in = _abandoned(fs, directory)
    return [path for path, entry in abandoned if entry.temporary]


def scan_stale_temporaries(
    fs: FileSystem, directory: str, *, directories: bool = True
) -> StaleScan:
    """:func:`remove_stale_temporaries`, also telling when to look again (for writers).

    Args:
        directories: Also remove temporary directories. Writers, which write files, leave
            them to their owner (a sharded snapshot recovers a committed snapshot from one
            before it removes the rest).
    """
    abandoned, recheck_in = _abandoned(fs, directory)
    removed = [
        path
        for path, entry in abandoned
        if _remove(fs, path, entry, directories) and entry.temporary
    ]
    return StaleScan(removed, recheck_in)


def _abandoned(fs: FileSystem, directory: str) -> tuple[list[tuple[str, _Found]], float | None]:
    # The provably abandoned temporaries (and leases without one), and when to look again.
    try:
        names = fs.listdir(directory or ".")
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    found: dict[str, _Found] = {}
    for name in names:
        parsed = parse_temporary_name(name) if name.startswith(".") else None
        if parsed is None:
            continue
        entry = found.setdefault(parsed.temporary, _Found(parsed.host, parsed.pid))
        if parsed.lease_period is None:
            entry.temporary = True
        else:
            entry.leases[name] = parsed.lease_period
    abandoned: list[tuple[str, _Found]] = []
    recheck_in: float | None = None
    clock = LeaseClock(fs, directory)
    here, own_pid = host_tag(), os.getpid()
    for name, entry in found.items():
        path = os.path.join(directory, name)
        if entry.host == here:
            if entry.pid == own_pid:
                continue
            if _process_is_gone(entry.pid):
                abandoned.append((path, entry))
                continue
        if not entry.leases:  # from another host (or a live process here), no lease: kept
            continue
        left = [
            clock.remaining(os.path.join(directory, lease), period)
            for lease, period in entry.leases.items()
        ]
        if None in left:
            continue
        remaining = max(value for value in left if value is not None)
        if remaining >= 0:
            recheck_in = remaining if recheck_in is None else min(recheck_in, remaining)
            continue
        abandoned.append((path, entry))
    return abandoned, recheck_in


def _remove(fs: FileSystem, path: str, entry: _Found, directories: bool = True) -> bool:
    # The temporary first: its lease keeps it recognisable until it is gone.
    if entry.temporary and not _remove_temporary(fs, path, directories):
        return False
    for lease in entry.leases:
        try:
            fs.remove(os.path.join(os.path.dirname(path), lease))
        except OSError:  # removed by another cleanup meanwhile, or for the next one
            pass
    return True


def _remove_temporary(fs: FileSystem, path: str, directories: bool = True) -> bool:
    isdir = getattr(fs, "isdir", None)
    if callable(isdir) and isdir(path) and not directories:
        return False
    if not (callable(isdir) and isdir(path)):
        try:
            fs.remove(path)
        except FileNotFoundError:  # another writer cleaned it first
            return False
        except IsADirectoryError:  # a file system without isdir
            pass
        else:
            return True
    remove_tree = getattr(fs, "remove_tree", None)
    if not callable(remove_tree):
        return False
    try:
        remove_tree(path)
    except Exception:  # e.g. a file in it owned by someone else: left for the next scan
        return False
    return True
