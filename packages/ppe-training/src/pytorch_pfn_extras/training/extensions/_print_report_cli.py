"""PrintReportCLI: the terminal PrintReport, also inside Jupyter."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._print_report import PrintReport


class PrintReportCLI(PrintReport):
    """:class:`PrintReport` that always prints to a stream, even inside a Jupyter notebook.

    ``PrintReport(...)`` without ``out`` creates a :class:`PrintReportNotebook` inside
    Jupyter; ``PrintReportCLI(...)`` never does: it prints the text table to ``out``
    (standard output by default), exactly as ``PrintReport(..., out=...)`` does.

    Args:
        entries: Keys of the log entries to print, in order; ``None`` shows every key.
        log_report: The name of a registered ``LogReport``, or a ``LogReport`` to drive.
        out: Stream to print to; standard output (looked up at each print) by default.

    Example:
        >>> manager.extend(extensions.PrintReportCLI(["epoch", "train/loss"]))
    """
