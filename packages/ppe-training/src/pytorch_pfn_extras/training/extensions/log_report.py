"""LogReport and the savefun that encodes its log, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.log_report import LogReport
    >>> manager.extend(LogReport(filename="log.jsonl", append=True))
"""

from __future__ import annotations

from typing import IO, Any

from pytorch_pfn_extras.training.extensions._log_report import _FORMATS, LogReport, _encode

__all__ = [
    "LogReport",
    "LogWriterSaveFunc",
]


class LogWriterSaveFunc:
    """A writer ``savefun`` that encodes log entries as JSON, JSON lines or YAML.

    Called as ``savefun(target, file_o)`` by a writer, it writes the list of entries
    ``target`` (dictionaries) into the binary file ``file_o``: the whole list, or with
    ``append`` only the last entry, for a writer that appends it to the file.

    Args:
        format: ``'json'``, ``'json-lines'`` or ``'yaml'``.
        append: Write only the last entry of the target.

    Raises:
        ValueError: An unknown format, or ``append`` with the ``'json'`` format.

    Example:
        >>> savefun = LogWriterSaveFunc("json-lines", append=True)
        >>> writer("log.jsonl", out_dir, log_entries, savefun=savefun, append=True)
    """

    def __init__(self, format: str, append: bool) -> None:
        if format not in _FORMATS:
            message = f"LogWriterSaveFunc: format must be one of {list(_FORMATS)}, got {format!r}"
            raise ValueError(message)
        if append and format == "json":
            message = (
                "LogWriterSaveFunc: append=True needs the 'json-lines' or 'yaml' format "
                "(a JSON document cannot be appended to)"
            )
            raise ValueError(message)
        self._format = format
        self._append = append

    def __call__(self, target: list[dict[str, Any]], file_o: IO[bytes]) -> None:
        """Write the entries of ``target`` (only the last one with ``append``)."""
        entries = list(target[-1:]) if self._append else list(target)
        file_o.write(_encode(entries, self._format))
