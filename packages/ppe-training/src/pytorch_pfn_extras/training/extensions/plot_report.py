"""PlotReport and a savefun for matplotlib figures, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.plot_report import PlotReport
    >>> manager.extend(PlotReport(["main/loss", "val/loss"], filename="loss.png"))
"""

from __future__ import annotations

from typing import IO, Any

from pytorch_pfn_extras.training.extensions._plot_report import PlotReport

__all__ = [
    "PlotReport",
    "matplotlib_savefun",
]


def matplotlib_savefun(target: Any, file_o: IO[bytes]) -> None:
    """A writer ``savefun`` that saves a matplotlib figure as PNG.

    Args:
        target: A ``matplotlib.figure.Figure``, or a ``(figure, pyplot)`` pair: the figure
            is then closed through ``pyplot`` once saved, which frees it.
        file_o: The binary file to write to.

    Example:
        >>> writer("plot.png", out_dir, (figure, plt), savefun=matplotlib_savefun)
    """
    if isinstance(target, tuple):
        figure, pyplot = target
    else:
        figure, pyplot = target, None
    figure.savefig(file_o, format="png")
    if pyplot is not None:
        pyplot.close(figure)
