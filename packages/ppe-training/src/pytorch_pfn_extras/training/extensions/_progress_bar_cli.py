"""ProgressBarCLI: the terminal ProgressBar, also inside Jupyter."""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions._progress_bar import ProgressBar


class ProgressBarCLI(ProgressBar):
    """:class:`ProgressBar` that always prints to a stream, even inside a Jupyter notebook.

    ``ProgressBar(...)`` without ``out`` creates a :class:`ProgressBarNotebook` inside
    Jupyter; ``ProgressBarCLI(...)`` never does: it draws the text bars on ``out``
    (standard output by default), exactly as ``ProgressBar(..., out=...)`` does.

    Args:
        training_length: ``(length, unit)`` of the whole training; the manager's stop
            trigger by default.
        update_interval: Number of iterations between two updates.
        bar_length: Length of the bars in characters.
        out: Stream to print to; standard output (looked up at each print) by default.

    Example:
        >>> manager.extend(extensions.ProgressBarCLI(update_interval=10))
    """
