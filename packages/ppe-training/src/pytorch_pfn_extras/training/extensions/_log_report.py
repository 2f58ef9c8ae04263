"""LogReport: averages reported values over an interval and writes them to a log file."""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from pytorch_pfn_extras.distributed._collective import (
    partial_state_is_mine,
    rank,
    reduce_summary,
)
from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension, check_keywords
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger
from pytorch_pfn_extras.training._writer_util import file_system_of
from pytorch_pfn_extras.training.extensions._bytes import write_bytes
from pytorch_pfn_extras.training.extensions._log_format import (
    _FORMATS,
    _Damage,
    _damaged_records,
    _encode,
    _encode_entry,
    _entry_iteration,
    _infer_format,
    _json_item,
    _parse_record,
    _read_log,
    _scan,
    _write_entries,
)
from pytorch_pfn_extras.training.extensions._rank_files import RankFiles

if TYPE_CHECKING:
    import pandas

    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.writing import FileSystem, Writer

# _FORMATS and _encode are also read from here by log_report.py (LogWriterSaveFunc).
__all__ = ["_FORMATS", "LogReport", "_encode"]

_KWARGS = ("writer", "log_name")


def _to_python(value: Any) -> Any:
    item = getattr(value, "item", None)
    return item() if callable(item) else value


class _Kept(NamedTuple):
    """What the first write of a process keeps of an appended log file."""

    data: bytes
    """The records kept, in the order of the file."""
    whole: bool
    """``data`` is the file as it is: nothing to cut off or take out."""
    prefix: bool
    """``data`` is the start of the file: cutting the file after it is enough."""


def _damage_lines(damaged: list[_Damage], shown: int = 5) -> str:
    """Where and why, for the first ``shown`` damaged records, and how many there are."""
    text = "; ".join(f"line {damage.line}: {damage.reason}" for damage in damaged[:shown])
    return text if len(damaged) <= shown else f"{text}; {len(damaged)} records in all"


class LogReport(Extension):
    """An extension to output the accumulated results to a log file.

    It is called every iteration and accumulates the observation (all keys, or ``keys``);
    when its own ``trigger`` fires, the means become a new log entry, which also holds
    ``epoch``, ``iteration`` and ``elapsed_time``, and the log is written into the
    manager's output directory through the writer (atomically: a crash never leaves a
    half-written log). Its state (the log and the partial interval) is saved in snapshots,
    so a resumed run writes exactly the log of the uninterrupted run. In a job of several
    processes, only global rank 0 writes the file, unless ``per_rank``.

    The log stays one valid file holding each entry once; a torn or damaged tail is set
    aside (kept in a side file next to the log, never deleted) with a warning naming the
    file and the line, and the run resumes. The first write of a process checks every
    record of the file: a torn last record and each complete record that cannot be read
    go, as they were, to a new ``<filename>.damaged-<n>`` with a ``UserWarning``. A damaged
    record in the middle is taken out alone: the readable records after it stay. A
    rewritten log (no ``append``) then comes back whole from the snapshot.

    Args:
        keys: Keys of values to accumulate; all keys when ``None``.
        trigger: When to emit an entry (distinct from when the extension is called, every
            iteration); one epoch by default.
        postprocess: Called with each entry before it is stored; may modify it.
        filename: Log file name under the output directory (``'log'`` by default). It can
            be a format string filled with the entry, e.g. ``'log_{iteration}'``.
        append: Append each entry to the file instead of rewriting the whole log
            (``'json-lines'`` and ``'yaml'`` only). The log is then not kept in snapshots,
            which makes them smaller, and :attr:`log` holds only the latest
            :attr:`append_log_maxlen` entries (the file has them all: :meth:`read`); on
            resume, entries written after the snapshot are dropped from the file.
        format: ``'json'``, ``'json-lines'`` or ``'yaml'``; inferred from the filename
            (``.jsonl``, ``.yaml``) by default, else ``'json'``.
        distributed: Log the means over the values reported on every process of the default
            process group: when an entry is emitted, the sums of the interval are added up
            over the ranks (a collective: every rank needs the LogReport, with the same
            trigger), so every rank logs the same entry (``elapsed_time`` aside). A key
            reported on some ranks only is averaged over those reports. In a snapshot
            written by one rank and loaded by all, the partial interval is that rank's: the
            others restart theirs empty, so that no value counts twice.
        per_rank: In a job of several processes (an initialized process group of more than
            one rank), every rank writes its own file, named with its rank before the
            suffix (``log.rank1.jsonl`` for ``log.jsonl``, ``log.rank1`` for ``log``).
            By default only global rank 0 writes the file; the other ranks keep their
            entries in :attr:`log`, as rank 0 does. The rank is read at the first write.
            Without a process group, the file is written under its name either way.
        **kwargs: ``writer``: a writer to use instead of the manager's (``writer=`` of a
            ``TensorBoardWriter`` included: it writes from the ranks that write files).

    Raises:
        ValueError: An unknown format, or ``append`` with the ``'json'`` format.
        TypeError: An unknown keyword argument.

    Example:
        >>> manager.extend(extensions.LogReport(filename="log.jsonl", append=True))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER
    append_log_maxlen: int = 1000
    """With ``append=True``, :attr:`log` keeps this many of the latest entries."""

    def __init__(
        self,
        keys: Iterable[str] | None = None,
        trigger: TriggerLike = (1, "epoch"),
        postprocess: Callable[[dict[str, Any]], None] | None = None,
        filename: str | None = None,
        append: bool = False,
        format: str | None = None,
        *,
        distributed: bool = False,
        per_rank: bool = False,
        **kwargs: Any,
    ) -> None:
        check_keywords("LogReport", kwargs, _KWARGS)
        if filename is None:
            filename = kwargs.get("log_name", "log")
        if not isinstance(filename, str) or not filename:
            message = f"LogReport: filename must be a non-empty string, got {filename!r}"
            raise ValueError(message)
        if format is None:
            format = _infer_format(filename)
        if format not in _FORMATS:
            message = f"LogReport: format must be one of {list(_FORMATS)}, got {format!r}"
            raise ValueError(message)
        if append and format == "json":
            message = (
                "LogReport: append=True needs the 'json-lines' or 'yaml' format (a JSON "
                f"document cannot be appended to); got format {format!r} for {filename!r}"
            )
            raise ValueError(message)
        self._distributed = bool(distributed)
        self._files = RankFiles(type(self).__name__, per_rank)
        self._keys = None if keys is None else tuple(keys)
        self._log_trigger = get_trigger(trigger)
        self._postprocess = postprocess
        self._filename = filename
        self._append = append
        self._format = format
        self._writer: Writer | None = kwargs.get("writer")
        self._log: list[dict[str, Any]] = []
        self._summary = DictSummary()
        self._n_written = 0
        self._entry_count = 0
        # Through a writer that does not write in place: look at the file before the first
        # write of the process, to set its damaged records aside (and, appending, keep the
        # rest: on resume, up to the snapshot).
        self._check_file = "{" not in filename
        self._iteration = 0
        # In-place writing: offset of the next entry (of the closing "\n]" for json) in the
        # file, None until this process first writes; what to keep of the file on resume.
        self._end: int | None = None
        self._resume_iteration: int | None = None
        self._resume_count: int | None = None

    @property
    def log(self) -> list[dict[str, Any]]:
        """The entries so far; with ``append=True``, the latest of this process only.

        In append mode at most :attr:`append_log_maxlen` entries are kept in memory
        (the oldest go first), so memory stays bounded however long the run.
        """
        return self._log

    @property
    def log_trigger(self) -> Trigger:
        """The trigger that emits the entries (``trigger`` of the constructor, as a
        :class:`~pytorch_pfn_extras.training.trigger.Trigger`); ``PrintReport`` reads its
        ``unit`` to choose the counter column."""
        return self._log_trigger

    @property
    def entry_count(self) -> int:
        """The number of entries emitted so far, those before a resume included.

        It grows by one with each entry, also when :attr:`log` is bounded (append
        mode) or restarted (resume in append mode); readers such as ``PrintReport``
        compare it with the count they have seen to find the new entries, the last
        ``entry_count - seen`` of :attr:`log`.
        """
        return self._entry_count

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Accumulate the observation; emit an entry when the log trigger fires."""
        observation = manager.observation
        self._iteration = manager.iteration
        keys = self._keys
        if keys is None:
            self._summary.add(observation)
        else:
            self._summary.add({key: observation[key] for key in keys if key in observation})
        if self._log_trigger(manager):
            self._emit(manager)

    def _emit(self, manager: ExtensionsManagerProtocol) -> None:
        summary = self._summary
        if self._distributed:
            summary = reduce_summary(summary, "LogReport(distributed=True)")
        entry: dict[str, Any] = {
            key: _to_python(value) for key, value in summary.compute_mean().items()
        }
        entry["epoch"] = manager.epoch
        entry["iteration"] = manager.iteration
        entry["elapsed_time"] = manager.elapsed_time
        if self._postprocess is not None:
            self._postprocess(entry)
        log = self._log
        log.append(entry)
        if self._append and len(log) > self.append_log_maxlen:
            del log[: len(log) - self.append_log_maxlen]  # moves at most maxlen pointers
        self._entry_count += 1
        self._summary = DictSummary()
        self._write(manager, entry)

    def _write(self, manager: ExtensionsManagerProtocol, entry: dict[str, Any]) -> None:
        writer = self._writer if self._writer is not None else manager.writer
        if writer is None:
            return
        filename = self._files.name(self._filename.format(**entry))
        if filename is None:  # another rank writes the file
            return
        out = manager.out
        # In place (the cost of one entry) with the default local writer and one file;
        # a whole-file atomic write or a writer append with any other writer.
        if "{" not in self._filename and getattr(writer, "writes_in_place", False):
            self._write_in_place(writer, filename, out, entry)
            self._n_written += 1
            return
        savefun = functools.partial(_write_entries, fmt=self._format)
        check, self._check_file = self._check_file, False
        if not self._append:
            if check:
                self._set_aside_damage(writer, filename, out)
            writer(filename, out, self._log, savefun=savefun)
        elif check:
            kept = self._kept_records(writer, filename, out)
            if kept.whole:
                writer(filename, out, [entry], savefun=savefun, append=True)
            else:
                data = kept.data + _encode([entry], self._format)
                writer(filename, out, data, savefun=write_bytes)
        else:
            writer(filename, out, [entry], savefun=savefun, append=True)
        self._n_written += 1

    def _write_in_place(
        self, writer: Writer, filename: str, out: str, entry: dict[str, Any]
    ) -> None:
        if self._end is None:
            self._end = self._start_file(writer, filename, out, entry)
        elif self._format == "json":
            # Overwrite the closing "\n]" with the next item and a new "\n]", in one write.
            data = b",\n" + _json_item(entry) + b"\n]"
            self._end = writer.write_in_place(filename, out, data, offset=self._end) - 2
        else:
            data = _encode_entry(entry, self._format)
            self._end = writer.write_in_place(filename, out, data, offset=self._end)

    def _start_file(self, writer: Writer, filename: str, out: str, entry: dict[str, Any]) -> int:
        """First write of this process: set the file up; return where the next entry goes."""
        if not self._append:
            # The log (of the snapshot, when resuming) replaces the file atomically; this
            # also repairs a file torn by a killed process.
            self._set_aside_damage(writer, filename, out)
            data = _encode(self._log, self._format)
            writer(filename, out, data, savefun=write_bytes)
            return len(data) - 2 if self._format == "json" else len(data)
        # Append mode: keep the complete records (up to the snapshot when resuming) and cut
        # off the rest (a torn record, entries written after the snapshot) by writing there.
        kept = self._kept_records(writer, filename, out)
        record = _encode_entry(entry, self._format)
        if kept.prefix:
            return writer.write_in_place(filename, out, record, offset=len(kept.data))
        data = kept.data + record  # a damaged record taken out: the file is rewritten
        writer(filename, out, data, savefun=write_bytes)
        return len(data)

    def _set_aside_damage(self, writer: Any, filename: str, out: str) -> None:
        """Before the log replaces the file: set the file's damaged records aside."""
        fs = file_system_of(writer, ("exists", "open"), "LogReport reads back its log file")
        path = os.path.join(out, filename)
        if fs.exists(path):
            with fs.open(path, "rb") as f:
                damaged = _damaged_records(f.read(), self._format)
            if damaged:
                self._set_aside(writer, fs, filename, out, damaged)

    def _kept_records(self, writer: Any, filename: str, out: str) -> _Kept:
        """Before appending: what to keep of the file, its damaged records set aside.

        The readable records are kept, up to the snapshot when resuming: those after its
        iteration (or after its first ``n_written`` for an older snapshot) are dropped.
        """
        resume_iteration, resume_count = self._resume_iteration, self._resume_count
        self._resume_iteration = self._resume_count = None
        fs = file_system_of(writer, ("exists", "open"), "LogReport reads back its log file")
        path = os.path.join(out, filename)
        if not fs.exists(path):
            return _Kept(b"", whole=True, prefix=True)
        with fs.open(path, "rb") as f:
            data: bytes = f.read()
        scan = _scan(data, self._format, parse=False)
        records = scan.records
        if resume_count is not None:  # a snapshot of an older version: count entries
            records = records[:resume_count]
        elif resume_iteration is not None:
            while records:
                entry = records[-1].entry
                if entry is None:
                    entry = _parse_record(data[records[-1].start : records[-1].end], self._format)
                iteration = _entry_iteration(entry)
                if iteration is None or iteration <= resume_iteration:
                    break
                records.pop()
        if scan.damaged:
            self._set_aside(writer, fs, filename, out, scan.damaged)
        if records and any(damage.line < records[-1].line for damage in scan.damaged):
            kept = b"".join(data[record.start : record.end] for record in records)
            return _Kept(kept, whole=False, prefix=False)
        end = records[-1].end if records else 0
        return _Kept(data[:end], whole=end == len(data), prefix=True)

    def _set_aside(
        self, writer: Any, fs: FileSystem, filename: str, out: str, damaged: list[_Damage]
    ) -> None:
        """Write the damaged records to a new side file ``<filename>.damaged-<n>``; warn."""
        number = 1
        while fs.exists(os.path.join(out, f"{filename}.damaged-{number}")):
            number += 1
        side = f"{filename}.damaged-{number}"
        writer(side, out, b"".join(damage.data for damage in damaged), savefun=write_bytes)
        message = (
            f"LogReport: the log {os.path.join(out, filename)} holds records that cannot be "
            f"read ({_damage_lines(damaged)}); they are set aside in "
            f"{os.path.join(out, side)} and the log goes on without them"
        )
        warnings.warn(message, UserWarning, stacklevel=2)

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Initialize the extension's own writer, if it was given one; the rank that writes
        the file is found again at the first write."""
        self._files.reset()
        if self._writer is not None:
            self._writer.initialize(manager.out)

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Finalize the extension's own writer, if it was given one."""
        if self._writer is not None:
            self._writer.finalize()

    def state_dict(self) -> dict[str, Any]:
        """Return the log (unless ``append``), the partial interval and trigger state."""
        state = {
            "log": [] if self._append else [dict(entry) for entry in self._log],
            "summary": self._summary.state_dict(),
            "log_trigger": self._log_trigger.state_dict(),
            "n_written": self._n_written,
            "entry_count": self._entry_count,
            "iteration": self._iteration,
        }
        if self._distributed:
            state["rank"] = rank()  # whose partial interval "summary" is
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`, or by PPE 0.9's LogReport (its
        ``_log`` JSON text, ``_summary`` and ``_trigger``)."""
        if "_log" in to_load and "log" not in to_load:
            to_load = {
                "log": json.loads(to_load["_log"]),
                "summary": to_load.get("_summary", {}),
                "log_trigger": to_load.get("_trigger", {}),
            }
        self._log = [dict(entry) for entry in to_load["log"]]
        self._summary = DictSummary()
        if not self._distributed or partial_state_is_mine(to_load):
            self._summary.load_state_dict(to_load["summary"])
        self._log_trigger.load_state_dict(to_load.get("log_trigger", {}))
        self._n_written = int(to_load.get("n_written", len(self._log)))
        self._entry_count = int(to_load.get("entry_count", max(self._n_written, len(self._log))))
        self._iteration = int(to_load.get("iteration", 0))
        # Entries appended after the snapshot are dropped on the next write (one file only):
        # those after its iteration, or after its first n_written for an older snapshot.
        self._check_file = "{" not in self._filename
        self._end = None
        if "iteration" in to_load:
            self._resume_iteration, self._resume_count = self._iteration, None
        else:
            self._resume_iteration, self._resume_count = None, self._n_written

    @staticmethod
    def read(path: str | os.PathLike[str], format: str | None = None) -> list[dict[str, Any]]:
        """Read a log file written by a LogReport: every entry that can be read.

        A process killed while writing an entry may leave part of it at the end of the
        file (a torn last entry, also what a reader sees of an entry being written): it
        is ignored. A record that is complete but cannot be read (damaged: not JSON or
        YAML, not an entry) is skipped with a warning naming the file and its line, and
        the entries after it are returned (in a JSON log, from the next entry's line).
        A resumed run sets both aside in a side file (see :class:`LogReport`).

        Args:
            path: The log file.
            format: ``'json'``, ``'json-lines'`` or ``'yaml'``; inferred from the
                file name when ``None`` (``.jsonl``, ``.yaml``, else ``'json'``).

        Raises:
            ValueError: An unknown format.

        Example:
            >>> entries = LogReport.read("result/log.jsonl")
        """
        fmt = _infer_format(os.fspath(path)) if format is None else format
        if fmt not in _FORMATS:
            message = f"LogReport.read: format must be one of {list(_FORMATS)}, got {fmt!r}"
            raise ValueError(message)
        with open(path, "rb") as f:
            entries, damaged = _read_log(f.read(), fmt)
        damaged = [damage for damage in damaged if not damage.torn]
        if damaged:
            message = (
                f"LogReport.read: {os.fspath(path)} holds records that cannot be read "
                f"({_damage_lines(damaged)}); they are skipped, {len(entries)} entries read"
            )
            warnings.warn(message, UserWarning, stacklevel=2)
        return entries

    def to_dataframe(self) -> pandas.DataFrame:
        """Return the log as a :class:`pandas.DataFrame` (needs pandas).

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas
        except ImportError as error:  # pragma: no cover -- pandas is installed in CI
            message = 'LogReport.to_dataframe needs pandas: pip install "ppe-training[pandas]"'
            raise ImportError(message) from error
        return pandas.DataFrame(self._log)
