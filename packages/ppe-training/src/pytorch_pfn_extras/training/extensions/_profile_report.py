"""ProfileReport: the profiler's timings, reported into the observation and logged."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.profiler import get_time_summary
from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._extension import PRIORITY_WRITER
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.training.extensions._log_report import LogReport

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol


def _key_set(keys: Iterable[str] | None, what: str) -> frozenset[str] | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        return frozenset((keys,))
    chosen = frozenset(keys)
    bad = sorted(repr(key) for key in chosen if not isinstance(key, str))
    if bad:
        message = f"ProfileReport: {what} must be strings, got {bad}"
        raise TypeError(message)
    return chosen


class ProfileReport(LogReport):
    """An extension to report and log the profiler's timings.

    The times measured by :func:`pytorch_pfn_extras.profiler.record` (and
    :meth:`~pytorch_pfn_extras.profiler.TimeSummary.report`) accumulate in the thread's
    :func:`~pytorch_pfn_extras.profiler.get_time_summary`. When ``trigger`` fires, the summary
    is taken and cleared: the mean of each tag (``"<tag>"``, seconds) and its extrema
    (``"<tag>.min"``, ``"<tag>.max"``) are reported into the manager's observation, so a
    :class:`LogReport` or :class:`PrintReport` running after it sees them, and a log entry
    (with ``epoch``, ``iteration`` and ``elapsed_time``) is stored in :attr:`log` and, when
    ``filename`` is given, written like :class:`LogReport` does. Its state (the log and the
    trigger) is saved in snapshots.

    Args:
        store_keys: Keys kept in the log entries; all keys when ``None``.
        report_keys: Keys reported into the observation; all keys when ``None``.
        trigger: When to take the summary; one epoch by default.
        filename: Log file under the output directory (a format string filled with the entry);
            ``None`` writes no file.
        append: Append entries to the file (``'json-lines'`` and ``'yaml'`` only).
        format: ``'json'``, ``'json-lines'`` or ``'yaml'``; inferred from ``filename``.
        per_rank: In a job of several processes (an initialized process group of more than
            one rank), every rank writes its own file, named with its rank before the
            suffix (``profile.rank1.jsonl`` for ``profile.jsonl``). By default only global
            rank 0 writes it; every rank reports its timings and keeps its :attr:`log`.
        **kwargs: ``writer``: a writer to use instead of the manager's.

    Raises:
        ValueError: An unknown format, or ``append`` with the ``'json'`` format.
        TypeError: An unknown keyword argument, or keys that are not strings.

    Example:
        >>> manager = ExtensionsManager(..., enable_profile=True)
        >>> manager.extend(extensions.ProfileReport(filename="profile.jsonl"))
    """

    priority = PRIORITY_WRITER

    def __init__(
        self,
        store_keys: Iterable[str] | None = None,
        report_keys: Iterable[str] | None = None,
        trigger: TriggerLike = (1, "epoch"),
        filename: str | None = None,
        append: bool = False,
        format: str | None = None,
        *,
        per_rank: bool = False,
        **kwargs: Any,
    ) -> None:
        self._store_keys = _key_set(store_keys, "store_keys")
        self._report_keys = _key_set(report_keys, "report_keys")
        self._writes_file = filename is not None
        if filename is None and format is None and not append:
            format = "json"  # nothing is written; any valid format will do
        super().__init__(
            keys=None,
            trigger=trigger,
            filename="profile" if filename is None else filename,
            append=append,
            format=format,
            per_rank=per_rank,
            **kwargs,
        )

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Report and log the timings when the trigger fires."""
        if not self._log_trigger(manager):
            return
        summary, extrema = get_time_summary().summary(clear=True)
        stats: dict[str, Any] = {**summary.compute_mean(), **extrema}  # floats: timings
        report_keys = self._report_keys
        reported = {k: v for k, v in stats.items() if report_keys is None or k in report_keys}
        if reported:
            manager.reporter.report(reported)
        store_keys = self._store_keys
        self._summary = DictSummary()
        self._summary.add({k: v for k, v in stats.items() if store_keys is None or k in store_keys})
        self._emit(manager)

    def _write(self, manager: ExtensionsManagerProtocol, entry: dict[str, Any]) -> None:
        if self._writes_file:
            super()._write(manager, entry)
