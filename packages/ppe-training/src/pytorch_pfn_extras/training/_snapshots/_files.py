"""Finding the snapshot files written from a filename template (for autoload and n_retains)."""

from __future__ import annotations

import os
import re
import string
from typing import Any

_NUMERIC = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_VALUE_PATTERNS = {
    "iteration": r"[0-9]+",
    "epoch": r"[0-9]+",
    "epoch_detail": r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?",
}
# Fields that order snapshots, most significant first.
_ORDER = ("iteration", "epoch", "epoch_detail")


def _is_temporary(name: str) -> bool:
    # Writers and snapshots name their temporaries ``.{filename}.tmp-...`` (ppe-core's
    # convention, pytorch_pfn_extras.writing.temporary_name).
    return name.startswith(".") and ".tmp-" in name


class SnapshotFiles:
    """The files a ``str.format`` template (e.g. ``snapshot_iter_{.iteration}``) matches.

    Files are ordered by the values of their ``iteration``, ``epoch`` and ``epoch_detail``
    fields (then any other numeric field, then the name), never by modification time.
    Hidden files (writers' temporaries) never match unless the template itself is hidden.
    """

    def __init__(self, template: str) -> None:
        directory, base = os.path.split(template)
        if "{" in directory or "}" in directory:
            message = (
                "autoload and n_retains need the directory part of the snapshot filename to "
                f"be fixed, got {template!r}"
            )
            raise ValueError(message)
        pattern: list[str] = []
        fields: list[str] = []
        try:
            parsed = list(string.Formatter().parse(base))
        except ValueError as error:
            message = f"invalid snapshot filename template {template!r}: {error}"
            raise ValueError(message) from error
        for literal, field, _spec, _conversion in parsed:
            pattern.append(re.escape(literal))
            if field is not None:
                kind = field.rsplit(".", 1)[-1]
                # ``{.iteration}`` is an integer: ``snapshot_iter_10.bak`` is not a snapshot.
                value = _VALUE_PATTERNS.get(kind, ".+?")
                pattern.append(f"(?P<f{len(fields)}>{value})")
                fields.append(field)
        self.directory = directory
        self._regex = re.compile("".join(pattern) + r"\Z")
        self._fields = fields
        rank = {name: i for i, name in enumerate(_ORDER)}
        # Field positions, ordered by significance (iteration first).
        self._order = sorted(
            range(len(fields)),
            key=lambda i: rank.get(fields[i].rsplit(".", 1)[-1], len(_ORDER)),
        )
        self._hidden = base.startswith(".")

    def match(self, name: str) -> tuple[Any, ...] | None:
        """The sort key of a file name, or ``None`` if the template does not match it."""
        if not self._hidden and name.startswith("."):
            return None
        if _is_temporary(name):
            return None
        found = self._regex.match(name)
        if found is None:
            return None
        key: list[Any] = []
        for i in self._order:
            text = found[f"f{i}"]
            if _NUMERIC.fullmatch(text):
                key.append((0, float(text)))
            else:
                key.append((1, text))
        key.append((1, name))
        return tuple(key)

    def list(self, fs: Any, out_dir: str) -> list[str]:
        """Paths of the matching files (and directories) under ``out_dir``, newest first.

        Args:
            fs: What lists the directory: a :class:`~._storage.Storage` or a file system
                with ``listdir``.
            out_dir: The output directory the template is relative to.
        """
        directory = os.path.join(out_dir, self.directory) if self.directory else out_dir
        try:
            names = fs.listdir(directory or ".")
        except (FileNotFoundError, NotADirectoryError):
            return []
        keyed = [(key, name) for name in names if (key := self.match(name)) is not None]
        keyed.sort(reverse=True)
        return [os.path.normpath(os.path.join(directory, name)) for _, name in keyed]

    def contains(self, path: str, out_dir: str) -> bool:
        """Whether ``path`` is one of the files of this template under ``out_dir``."""
        directory = os.path.join(out_dir, self.directory) if self.directory else out_dir
        head, name = os.path.split(path)
        return (
            os.path.normpath(head or ".") == os.path.normpath(directory or ".")
            and self.match(name) is not None
        )
