"""Names of writers' temporaries (``.{base}.tmp-{host}-{pid}-{random}``) and of their leases.

A temporary's name says who made it: ``host`` identifies the machine and PID namespace,
``pid`` the process. Its lease, a small file next to it that the writer refreshes while it
writes (see :func:`~pytorch_pfn_extras.writing.hold_lease`), is named after it with the
suffix ``.lease-{period in milliseconds}``: the name alone says when it expires, whatever
its content (a writer killed while refreshing it may leave it empty). Both are hidden and
contain ``.tmp-``, so that code listing an output directory skips them.
"""

from __future__ import annotations

import os
import re
import socket
import zlib
from typing import NamedTuple

__all__ = [
    "TemporaryName",
    "host_tag",
    "is_temporary_file",
    "lease_path",
    "parse_temporary_name",
    "temporary_base",
    "temporary_name",
]

_TEMP_RE = re.compile(
    r"^\.(?P<base>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{8}"
    r"(?P<lease>\.lease-(?P<period>[1-9][0-9]*))?$"
)
_host_tag_cache: list[str] = []


class TemporaryName(NamedTuple):
    """What the name of a temporary, or of its lease, says.

    Attributes:
        temporary: The temporary's file name (for a lease, its name without the suffix).
        host: The tag of the host and PID namespace that made it (see :func:`host_tag`).
        pid: The process that made it.
        lease_period: For a lease, its period in seconds; ``None`` for a temporary.
    """

    temporary: str
    host: str
    pid: int
    lease_period: float | None


def host_tag() -> str:
    """The tag of this host and PID namespace in temporary names (8 hex digits).

    A PID in a temporary's name is only ever checked on the machine (and container)
    that created it.
    """
    if not _host_tag_cache:
        try:
            namespace = str(os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            namespace = ""
        key = f"{socket.gethostname()}:{namespace}".encode()
        _host_tag_cache.append(f"{zlib.crc32(key):08x}")
    return _host_tag_cache[0]


def parse_temporary_name(name: str) -> TemporaryName | None:
    """What the file name ``name`` says as a temporary or lease; ``None`` for other names."""
    match = _TEMP_RE.match(name)
    if match is None:
        return None
    if match["lease"] is None:
        return TemporaryName(name, match["host"], int(match["pid"]), None)
    temporary = name[: match.start("lease")]
    return TemporaryName(temporary, match["host"], int(match["pid"]), int(match["period"]) / 1000)


def lease_path(temporary: str, period: float) -> str:
    """The path of the lease of ``temporary`` (a file or directory) refreshed every ``period`` s.

    ``period`` is written in whole milliseconds (at least one).
    """
    return f"{temporary}.lease-{max(1, round(period * 1000))}"


def temporary_name(base: str) -> str:
    """A fresh temporary name for the file (or directory) named ``base``, as writers use.

    The name is ``.{base}.tmp-{host}-{pid}-{random}``: :func:`is_temporary_file` recognises
    it, and :func:`remove_stale_temporaries` removes it once it is provably abandoned: its
    process is gone (on this host), or its lease (see :func:`hold_lease`) expired. Code that
    writes a file or a directory of its own next to a writer's output (write under this
    name, then rename) gets the same treatment for its leftovers.

    Args:
        base: The destination's file name, without its directory.

    Returns:
        A file name, without a directory; a new one at each call.

    Example:
        >>> name = temporary_name("snapshot_iter_10")
        >>> name.startswith(".snapshot_iter_10.tmp-"), is_temporary_file(name)
        (True, True)
    """
    return f".{base}.tmp-{host_tag()}-{os.getpid()}-{os.urandom(4).hex()}"


def temporary_base(name: str) -> str | None:
    """The file name a temporary stands for: ``base`` in ``.{base}.tmp-...``.

    Args:
        name: A file name, or a path whose last component is read.

    Returns:
        The destination's file name, without a directory; ``None`` when ``name`` is not
        a temporary's (a lease's included).

    Example:
        >>> temporary_base("out/.snapshot_iter_10.tmp-1a2b3c4d-4242-0badc0de")
        'snapshot_iter_10'
    """
    match = _TEMP_RE.match(os.path.basename(name))
    if match is None or match["lease"] is not None:
        return None
    return match["base"]


def is_temporary_file(name: str) -> bool:
    """Whether ``name`` (a file name or path) is a writer's temporary file or its lease.

    Code that scans an output directory (for example to find the newest
    snapshot) must skip these: they may be incomplete.

    Args:
        name: A file name, or a path whose last component is checked.

    Returns:
        ``True`` for names of the form ``.{filename}.tmp-...`` written by a writer,
        including the leases ``.{filename}.tmp-....lease-{period}`` next to them.

    Example:
        >>> is_temporary_file(".snapshot_iter_10.tmp-1a2b3c4d-4242-0badc0de")
        True
        >>> is_temporary_file(".snapshot_iter_10.tmp-1a2b3c4d-4242-0badc0de.lease-15000")
        True
        >>> is_temporary_file("snapshot_iter_10")
        False
    """
    return parse_temporary_name(os.path.basename(name)) is not None
