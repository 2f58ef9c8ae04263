"""PlotReport: plots averaged observations against the iteration, the epoch or a key."""

from __future__ import annotations

import importlib.util
import io
import itertools
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pytorch_pfn_extras.reporting import DictSummary
from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension, check_keywords
from pytorch_pfn_extras.training._trigger_util import TriggerLike, get_trigger
from pytorch_pfn_extras.training.extensions import _png_render, _png_worker
from pytorch_pfn_extras.training.extensions._bytes import write_bytes
from pytorch_pfn_extras.training.extensions._rank_files import RankFiles

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.training.extensions._png_worker import Drawing
    from pytorch_pfn_extras.writing import Writer

_KWARGS = ("background", "file_name", "writer")
Postprocess = Callable[[Any, Any, dict[str, list[tuple[float, float]]]], None]


def _needs_matplotlib(owner: str) -> str:
    return f'{owner} needs matplotlib: pip install "ppe-training[plot]"'


def plot_filename(owner: str, filename: str | None, default: str, kwargs: Mapping[str, Any]) -> str:
    """Check a plotting extension's extra keywords and matplotlib; return its file name.

    Raises:
        TypeError: A keyword other than ``background``, ``file_name`` and ``writer``.
        ImportError: matplotlib is not installed.
        ValueError: The file name is empty or not a string.
    """
    check_keywords(owner, kwargs, _KWARGS)
    if not PlotReport.available():
        message = _needs_matplotlib(owner)
        raise ImportError(message)
    if filename is None:
        filename = kwargs.get("file_name", default)
    if not isinstance(filename, str) or not filename:
        message = f"{owner}: filename must be a non-empty string, got {filename!r}"
        raise ValueError(message)
    return filename


class _Image:
    """An image to write: where, and the spec it is drawn from (by the worker, once sent)."""

    __slots__ = ("drawing", "filename", "out", "spec", "writer")

    def __init__(self, filename: str, out: str, writer: Writer, spec: dict[str, Any]) -> None:
        self.filename, self.out, self.writer, self.spec = filename, out, writer, spec
        self.drawing: Drawing | None = None

    def same_target(self, other: _Image) -> bool:
        return (self.filename, self.out, self.writer) == (other.filename, other.out, other.writer)


_MAX_PENDING = 4  # images waiting for the worker per extension; more: wait for them
_WAIT_S = 60.0  # an image the worker has not drawn by then is drawn in the training process
_owners = itertools.count()


class PngExtension(Extension):
    """An extension that writes PNG images of its data, named by ``_filename`` (formatted with
    ``epoch`` and ``iteration``), through its own writer or the manager's.

    With ``background`` (the default), images are drawn by the plot worker process
    (:mod:`._png_worker`) while training goes on, and written from the training thread at the
    extension's next call once drawn; :meth:`flush` (called by :meth:`finalize`, and at
    interpreter exit) waits for them. In a job of several processes only global rank 0 draws
    and writes, unless ``per_rank`` (see :class:`._rank_files.RankFiles`). Subclasses provide
    ``_kind`` (a drawing function of :mod:`._png_render`) and :meth:`_spec`, and call
    :meth:`_poll` at each call.
    """

    _kind: ClassVar[str]
    _filename: str
    _writer: Writer | None
    _background: bool

    def _init_png(self, filename: str, per_rank: bool, kwargs: Mapping[str, Any]) -> None:
        background = kwargs.get("background", True)
        if not isinstance(background, bool):
            message = f"{type(self).__name__}: background must be a bool, got {background!r}"
            raise TypeError(message)
        self._filename = filename
        self._files = RankFiles(type(self).__name__, per_rank)
        self._writer = kwargs.get("writer")
        self._background = background
        self._draw_state: dict[str, Any] = {}  # the figure kept by in-process drawing
        self._images: deque[_Image] = deque()  # not written yet; [0] may be being drawn
        self._owner = next(_owners)
        self._forget: weakref.finalize[Any, Any] | None = None

    def _spec(self) -> dict[str, Any]:
        """Everything the image depends on, picklable (see :mod:`._png_render`)."""
        raise NotImplementedError

    def render(self) -> bytes:
        """Draw the image of the data so far in this process and return the PNG bytes.

        Raises:
            ImportError: matplotlib is not installed.
        """
        return self._draw_here(self._spec())

    def _draw_here(self, spec: dict[str, Any]) -> bytes:
        try:
            draw = _png_render.DRAW[self._kind]
            return draw(self._draw_state, spec)
        except ImportError as error:
            message = _needs_matplotlib(type(self).__name__)
            raise ImportError(message) from error

    def _target(self, manager: ExtensionsManagerProtocol) -> tuple[Writer, str] | None:
        """The writer and the file name of the image now; ``None`` when this process writes
        no image (no writer, or another rank writes it)."""
        writer = self._writer if self._writer is not None else manager.writer
        if writer is None:
            return None
        filename = self._filename.format(epoch=manager.epoch, iteration=manager.iteration)
        name = self._files.name(filename)
        return None if name is None else (writer, name)

    def _write(self, manager: ExtensionsManagerProtocol) -> None:
        target = self._target(manager)
        if target is None:
            return
        writer, filename = target
        if not self._background:
            writer(filename, manager.out, self.render(), savefun=write_bytes)
            return
        image = _Image(filename, manager.out, writer, self._spec())
        images = self._images
        if len(images) > 1 and images[-1].same_target(image):
            images[-1] = image  # not sent yet: only the newest image of a file is drawn
        else:
            images.append(image)
        _png_worker.pending_owners.add(self)
        if len(images) == 1:
            self._send()
        elif len(images) > _MAX_PENDING:
            self.flush()

    def _poll(self) -> None:
        """Write the image the worker has drawn, if any (cheap when there is none)."""
        images = self._images
        if images:
            drawing = images[0].drawing
            if drawing is None:
                self._send()
            elif drawing.done:
                self._complete()

    def _send(self) -> None:
        """Have the first image drawn by the worker, or draw it here when the worker cannot."""
        images = self._images
        while images:
            image = images[0]
            worker = _png_worker.get_worker()
            drawing = worker.draw(self._kind, self._owner, image.spec) if worker else None
            if drawing is not None:
                image.drawing = drawing
                if self._forget is None:
                    self._forget = weakref.finalize(self, _png_worker.forget, self._owner)
                return
            images.popleft()
            self._emit(image, self._draw_here(image.spec))

    def _complete(self) -> None:
        image = self._images.popleft()
        drawing = image.drawing
        png = drawing.png if drawing is not None else None
        if png is None:  # the worker failed or ended: draw here (raising the drawing's error)
            png = self._draw_here(image.spec)
        self._emit(image, png)
        self._send()

    def _emit(self, image: _Image, png: bytes) -> None:
        image.writer(image.filename, image.out, png, savefun=write_bytes)

    def flush(self) -> None:
        """Write every image not written yet, waiting for the worker to draw them."""
        images = self._images
        while images:
            drawing = images[0].drawing
            if drawing is None:
                self._send()
                continue
            if not drawing.wait(_WAIT_S):
                drawing.finish(None, "timed out")
            self._complete()
        _png_worker.pending_owners.discard(self)

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Find the rank that writes the images again at the first write."""
        self._files.reset()

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Write the images not written yet; finalize the extension's own writer, if any."""
        self.flush()
        if self._forget is not None:
            self._forget()
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

    The plot is drawn off the training path: by a worker process (started at the first plot;
    it imports matplotlib, the training process does not), and the image is written from the
    training thread at a later call once drawn (tens of milliseconds later), by
    :meth:`finalize` at the latest; ``background=False`` draws and writes at the trigger, in
    this process. Either way the plot is drawn on a standalone ``matplotlib.figure.Figure``
    with the matplotlib settings (``rcParams``) of this process: pyplot is not used and the
    user's backend is neither chosen nor changed, so it works without a display. A plot with a
    ``postprocess`` is always drawn in this process (the function is the user's).

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
        per_rank: In a job of several processes (an initialized process group of more than
            one rank), every rank writes its own image, named with its rank before the
            suffix (``plot.rank1.png`` for ``plot.png``). By default only global rank 0
            draws and writes it; the other ranks keep their points in :attr:`data`. The rank
            is read at the first write.
        **kwargs: ``file_name`` (alias of ``filename``), ``writer`` (a writer to use
            instead of the manager's) and ``background`` (``True`` by default: draw in the
            plot worker).

    Raises:
        ImportError: matplotlib is not installed.
        TypeError: An unknown keyword argument, ``y_keys`` that are not strings, or a
            ``background`` that is not a bool.

    Example:
        >>> manager.extend(extensions.PlotReport(["train/loss", "val/loss"], "epoch",
        ...                                      filename="loss.png"))
    """

    trigger: TriggerLike = (1, "iteration")
    priority = PRIORITY_READER
    _kind = "plot_report"

    def __init__(
        self,
        y_keys: Iterable[str] | str | None,
        x_key: str = "iteration",
        trigger: TriggerLike = (1, "epoch"),
        postprocess: Postprocess | None = None,
        filename: str | None = None,
        marker: str | None = "x",
        grid: bool = True,
        *,
        per_rank: bool = False,
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
        self._marker = marker
        self._grid = grid
        self._init_png(filename, per_rank, kwargs)
        if postprocess is not None:
            self._background = False
        self._summary = DictSummary()
        self._data: dict[str, list[tuple[float, float]]] = {key: [] for key in keys}

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
        if self._images:
            self._poll()
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

    def _spec(self) -> dict[str, Any]:
        return {
            "y_keys": list(self._y_keys),
            "x_key": self._x_key,
            "marker": self._marker,
            "grid": self._grid,
            "data": {key: list(points) for key, points in self._data.items()},
            "rc": _png_render.changed_rc(),
        }

    def render(self) -> bytes:
        """Draw the points so far in this process and return the PNG image.

        Without a ``postprocess``, one figure is kept and its lines are updated at each draw.
        A ``postprocess`` gets a new figure each time, saved with a tight bounding box.

        Raises:
            ImportError: matplotlib is not installed.
        """
        if self._postprocess is None:
            return super().render()
        try:
            figure, axes, _ = _png_render.plot_report_figure(self._spec())
        except ImportError as error:
            message = _needs_matplotlib("PlotReport")
            raise ImportError(message) from error
        self._postprocess(figure, axes, self._data)
        buffer = io.BytesIO()
        extra = [axes.get_legend()] if axes.get_legend() is not None else []
        figure.savefig(buffer, format="png", bbox_extra_artists=extra, bbox_inches="tight")
        return buffer.getvalue()

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
