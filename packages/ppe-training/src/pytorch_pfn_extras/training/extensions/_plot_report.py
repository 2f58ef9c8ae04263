"""PlotReport: plots averaged observations against the iteration, the epoch or a key."""

from __future__ import annotations

import importlib.util
import io
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.writing import Writer

_KWARGS = ("file_name", "writer")
_MISSING = 'PlotReport needs matplotlib: pip install "ppe-training[plot]"'

Postprocess = Callable[[Any, Any, dict[str, list[tuple[float, float]]]], None]


def _import_figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(_MISSING) from error
    return Figure


def plot_filename(owner: str, filename: str | None, default: str, kwargs: Mapping[str, Any]) -> str:
    """Check a plotting extension's extra keywords and matplotlib; return its file name.

    Raises:
        TypeError: A keyword other than ``file_name`` and ``writer``.
        ImportError: matplotlib is not installed.
        ValueError: The file name is empty or not a string.
    """
    unknown = sorted(set(kwargs) - set(_KWARGS))
    if unknown:
        message = f"{owner} got unexpected keyword arguments {unknown}; accepted: {list(_KWARGS)}"
        raise TypeError(message)
    if not PlotReport.available():
        message = f'{owner} needs matplotlib: pip install "ppe-training[plot]"'
        raise ImportError(message)
    if filename is None:
        filename = kwargs.get("file_name", default)
    if not isinstance(filename, str) or not filename:
        message = f"{owner}: filename must be a non-empty string, got {filename!r}"
        raise ValueError(message)
    return filename


def _write_bytes(data: bytes, fileobj: IO[bytes], **kwargs: Any) -> None:
    fileobj.write(data)


class PngExtension(Extension):
    """An extension that writes the PNG its ``render()`` draws, named by ``_filename``
    (formatted with ``epoch`` and ``iteration``), through its own writer or the manager's."""

    _filename: str
    _writer: Writer | None

    def render(self) -> bytes:
        """Draw the image and return the PNG bytes."""
        raise NotImplementedError

    def _write(self, manager: ExtensionsManagerProtocol) -> None:
        writer = self._writer if self._writer is not None else manager.writer
        if writer is None:
            return
        filename = self._filename.format(epoch=manager.epoch, iteration=manager.iteration)
        writer(filename, manager.out, self.render(), savefun=_write_bytes)

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Finalize the extension's own writer, if it was given one."""
        if self._writer is not None:
            self._writer.finalize()


class PlotReport(PngExtension):
    """An extension to output plots.

    It is called every iteration and accumulates the observed values of ``y_keys`` (and of
    ``x_key`` when it is a key) in a
    :class:`~pytorch_pfn_extras.reporting.DictSummary`. When its own ``trigger`` fires,
    the means become one new point per key, the x value being the manager's iteration or
    epoch (or the mean of ``x_key``), and the plot of all the points so far is written as a
    PNG image into the manager's output directory, through the manager's writer (a crash
    never leaves a half-written image). The points and the partial interval are saved in
    snapshots, so a resumed run draws exactly the plot of an uninterrupted one.

    matplotlib is imported when the first plot is drawn. The plot is drawn on a
    standalone ``matplotlib.figure.Figure``: pyplot is not used and the user's backend is
    neither chosen nor changed, so it works without a display.

    Args:
        y_keys: Key or keys of the values to plot. ``None`` plots nothing.
        x_key: ``'iteration'`` (default), ``'epoch'``, or a key of the observation.
        trigger: When to add points and write the plot (distinct from when the extension
            is called, every iteration); each epoch by default.
        postprocess: Called as ``postprocess(figure, axes, data)`` before the image is
            saved, ``data`` mapping each key to its ``(x, y)`` points; it may change the
            figure.
        filename: Name of the image under the output directory, ``'plot.png'`` by default;
            a format string filled with ``epoch`` and ``iteration``. ``file_name`` is
            accepted as an alias.
        marker: Marker of the points; ``None`` draws lines only.
        grid: Draw the axes grid.
        **kwargs: ``file_name`` (alias of ``filename``) and ``writer`` (a writer to use
            instead of the manager's).

    Raises:
        ImportError: matplotlib is not installed.
        TypeError: An unknown keyword argument, or ``y_keys`` that are not strings.

    Example:
        >>> manager.extend(extensions.PlotReport(["train/loss", "val/loss"], "epoch",
        ...                                      filename="loss.png"))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER

    def __init__(
        self,
        y_keys: Iterable[str] | str | None,
        x_key: str = "iteration",
        trigger: TriggerLike = (1, "epoch"),
        postprocess: Postprocess | None = None,
        filename: str | None = None,
        marker: str | None = "x",
        grid: bool = True,
        **kwargs: Any,
    ) -> None:
        filename = plot_filename("PlotReport", filename, "plot.png", kwargs)
        if y_keys is None:
            keys: tuple[str, ...] = ()
        elif isinstance(y_keys, str):
            keys = (y_keys,)
        else:
            keys = tuple(y_keys)
        bad = [key for key in keys if not isinstance(key, str)]
        if bad or not isinstance(x_key, str):
            message = f"PlotReport: y_keys and x_key must be strings, got {[*bad, x_key]!r}"
            raise TypeError(message)
        if postprocess is not None and not callable(postprocess):
            message = f"PlotReport: postprocess must be callable, got {postprocess!r}"
            raise TypeError(message)
        self._y_keys = keys
        self._x_key = x_key
        self._x_is_counter = x_key in ("iteration", "epoch")
        self._keys = keys if self._x_is_counter else (*keys, x_key)
        self._plot_trigger = get_trigger(trigger)
        self._postprocess = postprocess
        self._filename = filename
        self._marker = marker
        self._grid = grid
        self._writer: Writer | None = kwargs.get("writer")
        self._summary = DictSummary()
        self._data: dict[str, list[tuple[float, float]]] = {key: [] for key in keys}
        self._figure: Any = None  # drawn again at each trigger (without a postprocess)
        self._lines: dict[str, Any] = {}

    @staticmethod
    def available() -> bool:
        """Whether matplotlib is installed (without importing it)."""
        if "matplotlib" in sys.modules:
            return sys.modules["matplotlib"] is not None
        return importlib.util.find_spec("matplotlib") is not None

    @property
    def data(self) -> dict[str, list[tuple[float, float]]]:
        """The ``(x, y)`` points of each key so far."""
        return self._data

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Accumulate the observation; add points and write the plot when due."""
        observation = manager.observation
        values = {key: observation[key] for key in self._keys if key in observation}
        if values:
            self._summary.add(values)
        if self._plot_trigger(manager):
            self._add_points(manager)
            if self._y_keys:
                self._write(manager)

    def _add_points(self, manager: ExtensionsManagerProtocol) -> None:
        means = self._summary.compute_mean()
        self._summary = DictSummary()
        x: float
        if self._x_key == "iteration":
            x = manager.iteration
        elif self._x_key == "epoch":
            x = manager.epoch
        elif self._x_key in means:
            x = float(means[self._x_key])
        else:
            return
        for key in self._y_keys:
            if key in means:
                self._data[key].append((x, float(means[key])))

    def render(self) -> bytes:
        """Draw the points so far and return the PNG image.

        Without a ``postprocess``, one figure is kept and its lines are updated at each
        trigger, with the legend's room beside the axes measured once (drawing a new figure
        with a tight bounding box costs twice as much). A ``postprocess`` gets a new figure
        each time.

        Raises:
            ImportError: matplotlib is not installed.
        """
        if self._postprocess is not None:
            figure, axes = self._new_figure()
            self._postprocess(figure, axes, self._data)
            buffer = io.BytesIO()
            extra = [axes.get_legend()] if axes.get_legend() is not None else []
            figure.savefig(buffer, format="png", bbox_extra_artists=extra, bbox_inches="tight")
            return buffer.getvalue()
        if self._figure is None:
            self._figure, axes = self._new_figure()
            legend = axes.get_legend()
            if legend is not None:
                from matplotlib.backends.backend_agg import FigureCanvasAgg

                renderer = FigureCanvasAgg(self._figure).get_renderer()  # type: ignore[no-untyped-call]
                width = legend.get_window_extent(renderer).width
                right = 1.0 - (width + 16.0) / self._figure.bbox.width
                self._figure.subplots_adjust(right=max(right, 0.3))
        else:
            axes = self._figure.axes[0]
            for key, line in self._lines.items():
                points = self._data[key]
                line.set_data([x for x, _ in points], [y for _, y in points])
            axes.relim()
            axes.autoscale_view()
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png")
        return buffer.getvalue()

    def _new_figure(self) -> tuple[Any, Any]:
        figure = _import_figure()()
        axes = figure.add_subplot()
        self._lines = {}
        for key in self._y_keys:
            points = self._data[key]
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            (self._lines[key],) = axes.plot(xs, ys, marker=self._marker, label=key)
        axes.legend(bbox_to_anchor=(1.02, 1), loc="upper left", borderaxespad=0.0)
        if self._grid:
            axes.grid()
        axes.set_xlabel(self._x_key)
        return figure, axes

    def state_dict(self) -> dict[str, Any]:
        """Return the points, the partial interval and the state of the plot trigger."""
        return {
            "data": {key: [list(point) for point in points] for key, points in self._data.items()},
            "summary": self._summary.state_dict(),
            "plot_trigger": self._plot_trigger.state_dict(),
        }

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        data = to_load["data"]
        self._data = {
            key: [(float(x), float(y)) for x, y in data.get(key, [])] for key in self._y_keys
        }
        self._summary = DictSummary()
        self._summary.load_state_dict(to_load["summary"])
        self._plot_trigger.load_state_dict(to_load.get("plot_trigger", {}))
