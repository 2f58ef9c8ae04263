"""PrintReport and PrintReportNotebook: show the entries of a LogReport as a table."""

from __future__ import annotations

import html
import importlib.util
import io
import sys
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, cast

from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training.extensions._log_report import LogReport

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

_MIN_WIDTH = 10
UNITS = ("epoch", "iteration")
"""The counters of a log entry; a table shows the one of its log report's trigger unit."""
_LAST = "elapsed_time"


class _StandardOutput(io.TextIOBase):
    """``sys.stdout`` as it is at each write: the default ``out`` of the report extensions.

    PPE's default is ``sys.stdout`` as it was when the module was imported, which misses a
    later ``contextlib.redirect_stdout`` (or pytest's ``capsys``); this stream follows it.
    """

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        stream = sys.stdout
        if stream is not None:  # None at interpreter shutdown
            stream.flush()

    def isatty(self) -> bool:
        isatty = getattr(sys.stdout, "isatty", None)
        return callable(isatty) and bool(isatty())

    def writable(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<stdout>"


STDOUT = cast("IO[str]", _StandardOutput())
"""Default ``out`` of PrintReport and ProgressBar: the current standard output."""


def in_notebook() -> bool:
    """Whether the code runs in a Jupyter kernel with ipywidgets installed.

    IPython is not imported: a kernel has loaded it already, so an interpreter without it
    in ``sys.modules`` is not a notebook.
    """
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    if get_ipython is None:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    is_kernel = "IPKernelApp" in getattr(shell, "config", {}) or any(
        cls.__name__ == "ZMQInteractiveShell" for cls in type(shell).__mro__
    )
    return is_kernel and importlib.util.find_spec("ipywidgets") is not None


def import_ipywidgets(owner: str) -> Any:
    """Import ipywidgets, or raise an ImportError naming the extra to install."""
    try:
        import ipywidgets
    except ImportError as error:
        message = f'{owner} needs ipywidgets: pip install "ppe-training[notebook]"'
        raise ImportError(message) from error
    return ipywidgets


def display(widget: Any) -> None:
    """Show a widget in the notebook (IPython is loaded whenever ipywidgets is)."""
    from IPython.display import display as ipython_display

    ipython_display(widget)  # type: ignore[no-untyped-call]


def order_entries(keys: Sequence[str], unit: str | None) -> list[str]:
    """PPE's column order of a table of log entries counted in ``unit``.

    The key of ``unit`` first (when present), the other counter dropped (both without a
    unit), ``elapsed_time`` last, the other keys in their order.
    """
    entries = [key for key in keys if key not in UNITS and key != _LAST]
    if unit in UNITS and unit in keys:
        entries.insert(0, unit)
    if _LAST in keys:
        entries.append(_LAST)
    return entries


def _format(value: Any, width: int) -> str:
    if isinstance(value, (int, float)):
        return f"{value:<{width}g}"
    return f"{value!s:<{width}}"


class PrintReport(Extension):
    """An extension to print the accumulated results.

    It prints the entries of a :class:`~pytorch_pfn_extras.training.extensions.LogReport`
    as a table, one row per new log entry, with a header before the first row. Inside a
    Jupyter notebook (with ipywidgets installed) ``PrintReport(...)`` without ``out``
    creates a :class:`PrintReportNotebook`, which shows the table as an HTML widget.

    It is called every iteration and prints the entries the log report added since (it
    counts them with ``LogReport.entry_count``, so it prints every entry also when the log
    kept in memory is bounded, in append mode); it should be registered after the
    ``LogReport`` (or given one, see ``log_report``). Rows already printed are not printed
    again after a resume.

    Args:
        entries: Keys of the log entries to print, in order. ``None`` shows every key of
            the log in the order it first appeared, as PPE does: at the front only the
            counter of the log report's trigger unit (``epoch`` or ``iteration``; neither
            for a trigger without a ``unit``), ``elapsed_time`` last; the header is
            printed again when a new column appears.
        log_report: The name of a ``LogReport`` registered to the manager, or a
            ``LogReport`` instance that this extension drives itself (call it, save its
            state).
        out: Stream to print to; by default standard output, looked up at each print (so
            ``contextlib.redirect_stdout`` applies); ``None`` means the same.

    Raises:
        TypeError: ``log_report`` is neither a string nor a ``LogReport``, or ``entries``
            is a string.

    Example:
        >>> manager.extend(extensions.LogReport())
        >>> manager.extend(extensions.PrintReport(["epoch", "iteration", "train/loss"]))
    """

    trigger = (1, "iteration")
    priority = PRIORITY_READER

    def __new__(cls, *args: Any, **kwargs: Any) -> PrintReport:
        out = kwargs.get("out", args[2] if len(args) > 2 else STDOUT)
        if cls is PrintReport and (out is None or out is STDOUT) and in_notebook():
            cls = PrintReportNotebook
        return super().__new__(cls)

    def __init__(
        self,
        entries: Sequence[str] | None = None,
        log_report: str | LogReport = "LogReport",
        out: IO[str] | None = STDOUT,
    ) -> None:
        if isinstance(entries, str):
            message = f"PrintReport: entries must be a sequence of keys, got the str {entries!r}"
            raise TypeError(message)
        if not isinstance(log_report, (str, LogReport)):
            message = (
                "PrintReport: log_report must be the name of a LogReport or a LogReport, "
                f"got {log_report!r}"
            )
            raise TypeError(message)
        self._infer = entries is None
        self._entries: list[str] = [] if entries is None else list(entries)
        self._keys: list[str] = []  # with entries=None: every key seen, first seen first
        self._log_report = log_report
        self._log: LogReport | None = None
        self._out = STDOUT if out is None else out
        self._n_printed = 0
        self._header_shown = False

    def get_log_report(self, manager: ExtensionsManagerProtocol) -> LogReport:
        """Return the log report whose entries are printed.

        Raises:
            TypeError: The extension registered under ``log_report`` is not a ``LogReport``.
        """
        log = self._log
        if log is None:
            if isinstance(self._log_report, LogReport):
                log = self._log_report
            else:
                log = manager.get_extension(self._log_report)
                if not isinstance(log, LogReport):
                    message = (
                        f"PrintReport: the extension {self._log_report!r} is a "
                        f"{type(log).__name__}, not a LogReport"
                    )
                    raise TypeError(message)
            self._log = log
        return log

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Initialize the log report it drives, if it was given one."""
        if isinstance(self._log_report, LogReport):
            self._log_report.initialize(manager)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Print the log entries added since the last call."""
        log_report = self._log
        if log_report is None:
            log_report = self.get_log_report(manager)
        if log_report is self._log_report:
            log_report(manager)
        if log_report.entry_count > self._n_printed:
            self._show(log_report)

    def _show(self, log_report: LogReport) -> None:
        # The new entries are the last ones of the log; an append-mode log keeps only the
        # latest LogReport.append_log_maxlen, so a longer gap between calls prints those.
        log = log_report.log
        count = log_report.entry_count
        new = log[len(log) - min(count - self._n_printed, len(log)) :]
        if self._infer and self._update_entries(new, log_report):
            self._header_shown = False
        self._n_printed = count
        self._render(log, new)

    def _update_entries(self, new: list[dict[str, Any]], log_report: LogReport) -> bool:
        """Add the keys of new entries; return whether the columns changed."""
        keys = self._keys
        known = set(keys)
        for entry in new:
            for key in entry:
                if key not in known:
                    known.add(key)
                    keys.append(key)
        unit = getattr(log_report.log_trigger, "unit", None)
        entries = order_entries(keys, unit)
        if entries == self._entries:
            return False
        self._entries = entries
        return True

    def _render(self, log: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        out = self._out
        widths = [max(_MIN_WIDTH, len(key)) for key in self._entries]
        parts = []
        if not self._header_shown:
            self._header_shown = True
            parts.append("  ".join(f"{k:<{w}}" for k, w in zip(self._entries, widths)).rstrip())
        for entry in new:
            cells = (
                _format(entry[key], w) if key in entry else " " * w
                for key, w in zip(self._entries, widths)
            )
            parts.append("  ".join(cells).rstrip())
        text = "\n".join(parts) + "\n"
        isatty = getattr(out, "isatty", None)
        if callable(isatty) and isatty():
            text = "\x1b[J" + text  # clear a progress bar drawn below the cursor
        out.write(text)
        out.flush()

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Print the entries not printed yet; finalize the log report it drives."""
        log_report = self._log
        if log_report is None and isinstance(self._log_report, LogReport):
            log_report = self._log_report
        if log_report is not None and log_report.entry_count > self._n_printed:
            self._show(log_report)
        if isinstance(self._log_report, LogReport):
            self._log_report.finalize(manager)

    def state_dict(self) -> dict[str, Any]:
        """Return the number of entries printed (and the state of its own log report)."""
        state: dict[str, Any] = {"n_printed": self._n_printed, "entries": list(self._entries)}
        if self._infer:
            state["keys"] = list(self._keys)
        if isinstance(self._log_report, LogReport):
            state["log_report"] = self._log_report.state_dict()
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        if "log_report" in to_load and isinstance(self._log_report, LogReport):
            self._log_report.load_state_dict(to_load["log_report"])
        self._n_printed = int(to_load["n_printed"])
        if self._infer:
            self._entries = list(to_load.get("entries", []))
            self._keys = list(to_load.get("keys", self._entries))
        self._header_shown = False


class PrintReportNotebook(PrintReport):
    """:class:`PrintReport` for Jupyter notebooks: the table is an HTML widget.

    The widget (``ipywidgets.HTML``) is displayed when training starts and updated with
    every new log entry; it holds all the entries of the log.

    Args:
        entries: Keys of the log entries to show; ``None`` shows every key.
        log_report: The name of a registered ``LogReport``, or a ``LogReport`` to drive.
        out: Ignored (accepted so that ``PrintReport(...)`` can create this class).

    Raises:
        ImportError: ipywidgets is not installed.

    Example:
        >>> manager.extend(extensions.PrintReportNotebook(["epoch", "train/loss"]))
    """

    def __init__(
        self,
        entries: Sequence[str] | None = None,
        log_report: str | LogReport = "LogReport",
        out: IO[str] | None = STDOUT,
    ) -> None:
        super().__init__(entries, log_report, out)
        self.widget = import_ipywidgets("PrintReportNotebook").HTML(value="")
        """The ``ipywidgets.HTML`` widget showing the table."""
        self._displayed = False

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Display the widget; initialize the log report it drives."""
        super().initialize(manager)
        if not self._displayed:
            self._displayed = True
            display(self.widget)

    def _render(self, log: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        entries = self._entries
        head = "".join(f"<th>{html.escape(key)}</th>" for key in entries)
        rows = []
        for entry in log:
            cells = "".join(
                f"<td>{html.escape(_format(entry[key], 0)) if key in entry else ''}</td>"
                for key in entries
            )
            rows.append(f"<tr>{cells}</tr>")
        self.widget.value = (
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
