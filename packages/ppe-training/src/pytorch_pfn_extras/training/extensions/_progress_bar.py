"""ProgressBar and ProgressBarNotebook: training progress, speed and time to finish."""

from __future__ import annotations

import datetime
import html
import math
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._engine import _progress
from pytorch_pfn_extras.training._engine._progress import bar as _bar
from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.training.extensions._print_report import (
    STDOUT,
    display,
    import_ipywidgets,
    in_notebook,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

_UNITS = ("iteration", "epoch")


class _Status(NamedTuple):
    total: float  # fraction of training done, in [0, 1]
    epoch: float  # fraction of the current epoch done
    iteration: int
    epoch_count: int
    length: float
    unit: str
    speed: float | None  # iterations per second
    eta: float | None  # seconds


def _check_positive_int(value: Any, name: str) -> int:
    if not is_int(value) or value < 1:
        message = f"ProgressBar: {name} must be a positive integer, got {value!r}"
        raise ValueError(message)
    return value


def _check_length(training_length: Any) -> tuple[float, str] | None:
    if training_length is None:
        return None
    if (
        not isinstance(training_length, (tuple, list))
        or len(training_length) != 2
        or isinstance(training_length[0], bool)
        or not isinstance(training_length[0], (int, float))
        or training_length[0] <= 0
        or training_length[1] not in _UNITS
    ):
        message = (
            "ProgressBar: training_length must be (length, 'iteration' or 'epoch') with a "
            f"positive length, got {training_length!r}"
        )
        raise ValueError(message)
    return float(training_length[0]), str(training_length[1])


def _length_of(manager: ExtensionsManagerProtocol) -> tuple[float, str]:
    stop_trigger = getattr(manager, "_stop_trigger", None)
    get_length = getattr(stop_trigger, "get_training_length", None)
    if get_length is None:
        message = (
            "ProgressBar cannot tell the length of training from the manager's stop trigger "
            f"{stop_trigger!r}; pass training_length=(length, 'epoch' or 'iteration')"
        )
        raise ValueError(message)
    length, unit = get_length()
    return float(length), str(unit)


def _epoch_fraction(iteration: int, epoch_detail: float) -> float:
    """Fraction of the current epoch done; a just completed epoch is full, not empty.

    ``epoch_detail`` is ``iteration / iters_per_epoch``: a whole number exactly at the end of
    an epoch (the quotient of two integers is rounded correctly).
    """
    fraction = epoch_detail - math.floor(epoch_detail)
    if fraction == 0 and iteration > 0:
        return 1.0
    return fraction


def _plural(count: float, unit: str) -> str:
    return f"{count:g} {unit}" + ("s" if count != 1 else "")


class _Drawing(_progress.ProgressBar):
    """The drawing and the speed of :class:`ProgressBar`: the lines it is given, in place."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__(out)
        self.lines: list[str] = []

    def get_lines(self) -> list[str]:
        return self.lines

    def since(
        self, iteration: int, epoch_detail: float
    ) -> tuple[_progress.Timing, _progress.Timing]:
        """Record the progress now; return the oldest of the last 10 records, and this one."""
        return self._record(iteration, epoch_detail)

    def draw(self, lines: list[str], *, final: bool) -> bool:
        """Draw ``lines``; return whether they are to be drawn over (see ``_draw``)."""
        self.lines = lines
        return self._draw(final=final)


def _finish_text(status: _Status) -> str:
    if status.speed is None or status.eta is None:
        return "  estimating the speed..."
    eta = datetime.timedelta(seconds=round(status.eta))
    return f"{status.speed:10.5g} iters/sec. Estimated time to finish: {eta}."


class ProgressBar(Extension):
    """An extension to print a progress bar and recent training status.

    Every ``update_interval`` iterations it shows the progress of the whole training and of
    the current epoch, the iteration and epoch counts, the speed in iterations per second
    (over the last updates) and the estimated time to finish::

             total [#########.........................................]  18.00%
        this epoch [##########################........................]  52.00%
               900 iter, 1 epoch / 5 epochs
            4310.2 iters/sec. Estimated time to finish: 0:00:01.

    Its default trigger is ``(update_interval, 'iteration')``, so the manager does not even
    call it in between; the final state is shown when training ends. On a terminal the bar
    is redrawn in place; on other streams (files, pipes) each update is printed below the
    previous one, without control characters. Inside a Jupyter notebook (with ipywidgets
    installed) ``ProgressBar(...)`` without ``out`` creates a :class:`ProgressBarNotebook`.

    Each update goes through :meth:`update`, which subclasses may override (as PPE's
    ``ProgressBarNotebook.update``).

    Args:
        training_length: ``(length, unit)`` of the whole training, ``unit`` being
            ``'iteration'`` or ``'epoch'``; by default taken from the manager's stop trigger
            (``max_epochs``).
        update_interval: Number of iterations between two updates.
        bar_length: Length of the bars in characters.
        out: Stream to print to; by default standard output, looked up at each print (so
            ``contextlib.redirect_stdout`` applies); ``None`` means the same.

    Raises:
        ValueError: A malformed ``training_length``, or a non-positive ``update_interval``
            or ``bar_length``.

    Example:
        >>> manager.extend(extensions.ProgressBar(update_interval=10))
    """

    trigger: TriggerLike = (100, "iteration")
    priority = PRIORITY_READER

    def __new__(cls, *args: Any, **kwargs: Any) -> ProgressBar:
        out = kwargs.get("out", args[3] if len(args) > 3 else STDOUT)
        if cls is ProgressBar and (out is None or out is STDOUT) and in_notebook():
            cls = ProgressBarNotebook
        return super().__new__(cls)

    def __init__(
        self,
        training_length: tuple[float, str] | None = None,
        update_interval: int = 100,
        bar_length: int = 50,
        out: IO[str] | None = STDOUT,
    ) -> None:
        self._training_length = _check_length(training_length)
        self._update_interval = _check_positive_int(update_interval, "update_interval")
        # The manager skips the other iterations without calling the extension.
        self.trigger = (self._update_interval, "iteration")
        self._bar_length = _check_positive_int(bar_length, "bar_length")
        self._out = STDOUT if out is None else out
        self._length: tuple[float, str] | None = self._training_length
        self._drawing: _Drawing | None = None  # drawing and timing, from initialize()
        self._shown_at = -1
        self._drawn_in_place = False

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Find the length of training and start timing."""
        if self._length is None:
            self._length = _length_of(manager)
        self._drawing = _Drawing(self._out)
        self._drawing.since(manager.iteration, manager.epoch_detail)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Update the bar every ``update_interval`` iterations."""
        if manager.iteration % self._update_interval:
            return
        if self._drawing is None:  # called without initialize()
            self.initialize(manager)
        self.update(manager.iteration, manager.epoch_detail)

    def update(self, iteration: int, epoch_detail: float) -> None:
        """Show the progress after ``iteration`` iterations, ``epoch_detail`` epochs.

        Args:
            iteration: Iterations done.
            epoch_detail: Epochs done, with the fraction of the current one.

        Raises:
            RuntimeError: The length of training is unknown: no ``training_length`` was
                given and the manager has not initialized the extension yet.
        """
        if self._length is None:
            message = (
                f"{type(self).__name__}.update needs the length of training: pass "
                "training_length=(length, unit), or let the manager initialize the extension"
            )
            raise RuntimeError(message)
        self._shown_at = iteration
        self._render(self._status(iteration, epoch_detail))

    def _status(self, iteration: int, epoch_detail: float) -> _Status:
        """The status after ``iteration`` iterations; records the time, for the speed."""
        assert self._length is not None
        length, unit = self._length
        if self._drawing is None:  # update() called before initialize()
            self._drawing = _Drawing(self._out)
        old, now = self._drawing.since(iteration, epoch_detail)
        done, old_done = (
            (iteration, old.iteration) if unit == "iteration" else (epoch_detail, old.epoch_detail)
        )
        speed = eta = None
        if iteration > old.iteration and now.time > old.time and done > old_done:
            speed = (iteration - old.iteration) / (now.time - old.time)
            eta = max(length - done, 0) * (now.time - old.time) / (done - old_done)
        return _Status(
            total=done / length,
            epoch=_epoch_fraction(iteration, epoch_detail),
            iteration=iteration,
            epoch_count=math.floor(epoch_detail),
            length=length,
            unit=unit,
            speed=speed,
            eta=eta,
        )

    def _lines(self, status: _Status) -> list[str]:
        n = self._bar_length
        return [
            f"     total [{_bar(status.total, n)}] {status.total:7.2%}",
            f"this epoch [{_bar(status.epoch, n)}] {status.epoch:7.2%}",
            f"{status.iteration:10d} iter, {status.epoch_count} epoch / "
            + _plural(status.length, status.unit),
            _finish_text(status),
        ]

    def _render(self, status: _Status, final: bool = False) -> None:
        # On a terminal: clear below the cursor, draw, and go back up unless it is the last
        # drawing; elsewhere each drawing below the previous one.
        assert self._drawing is not None
        self._drawn_in_place = self._drawing.draw(self._lines(status), final=final)

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Show the final state (once more if the last update was not at the end)."""
        bar = self._drawing
        if self._length is None or bar is None:
            return
        iteration = manager.iteration
        if iteration == self._shown_at:
            if self._drawn_in_place:  # the last drawing again, for good
                self._drawn_in_place = bar.draw(bar.lines, final=True)
            return
        self._shown_at = iteration
        self._render(self._status(iteration, manager.epoch_detail), final=True)


class ProgressBarNotebook(ProgressBar):
    """:class:`ProgressBar` for Jupyter notebooks, made of ipywidgets.

    Two ``FloatProgress`` bars (the whole training and the current epoch) and an ``HTML``
    line with the counts, the speed and the estimated time to finish, displayed when
    training starts.

    Args:
        training_length: ``(length, unit)`` of the whole training; the manager's stop
            trigger by default.
        update_interval: Number of iterations between two updates.
        bar_length: Ignored (the widgets have their own width).
        out: Ignored (accepted so that ``ProgressBar(...)`` can create this class).

    :meth:`update` (``update(iteration, epoch_detail)``, as in PPE) refreshes the widgets.

    Raises:
        ImportError: ipywidgets is not installed.

    Example:
        >>> manager.extend(extensions.ProgressBarNotebook(update_interval=10))
    """

    def __init__(
        self,
        training_length: tuple[float, str] | None = None,
        update_interval: int = 100,
        bar_length: int = 50,
        out: IO[str] | None = STDOUT,
    ) -> None:
        super().__init__(training_length, update_interval, bar_length, out)
        widgets = import_ipywidgets("ProgressBarNotebook")
        self.total_bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="total")
        """Progress of the whole training (``ipywidgets.FloatProgress``)."""
        self.epoch_bar = widgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="this epoch"
        )
        """Progress of the current epoch (``ipywidgets.FloatProgress``)."""
        self.status = widgets.HTML(value="")
        """Counts, speed and estimated time to finish (``ipywidgets.HTML``)."""
        self.widget = widgets.VBox([self.total_bar, self.epoch_bar, self.status])
        """The box holding the three widgets."""
        self._displayed = False

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Find the length of training, start timing and display the widgets."""
        super().initialize(manager)
        if not self._displayed:
            self._displayed = True
            display(self.widget)

    def _render(self, status: _Status, final: bool = False) -> None:
        self.total_bar.value = min(status.total, 1.0)
        self.epoch_bar.value = status.epoch
        counts = f"{status.iteration} iter, {status.epoch_count} epoch / " + _plural(
            status.length, status.unit
        )
        self.status.value = f"{html.escape(counts)}<br>{html.escape(_finish_text(status).strip())}"
