"""Drawing of the plotting extensions' PNG images, in the training process or in a worker.

This module imports only the standard library at import time, and NumPy and matplotlib when
a plot is drawn, so that it also runs as the plot worker's program (a separate Python process
started by :mod:`._png_worker`, which never imports torch): ``python <this file>`` reads
pickled requests from its standard input and answers on its standard output.

A *spec* is a plain, picklable dictionary holding everything an image depends on (the points,
the options, and the matplotlib settings the user changed). Each drawing function takes a spec
and a *state*, a dictionary owned by one extension, where it may keep a figure to update at the
next draw; the same spec gives the same bytes in the training process and in the worker.
"""

from __future__ import annotations

import io
import pickle
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

Spec = dict[str, Any]
State = dict[str, Any]

# rcParams that are about the process (its backend, interactive mode), not about an image.
_PROCESS_RC = frozenset({"backend", "backend_fallback", "interactive", "timezone"})


def changed_rc() -> dict[str, Any] | None:
    """The matplotlib settings of this process that differ from matplotlib's defaults.

    ``None`` when matplotlib has not been imported here (nothing can have been changed).
    A worker applies them while drawing, so an image looks as it would in this process.
    """
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return None
    defaults = matplotlib.rcParamsDefault
    return {
        key: value
        for key, value in dict.items(matplotlib.rcParams)
        if key not in _PROCESS_RC and not _equal(value, defaults.get(key))
    }


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. arrays: compare what they hold
        return repr(a) == repr(b)


@contextmanager
def _rc(spec: Spec) -> Iterator[None]:
    rc = spec.get("rc")
    if not rc:
        yield
        return
    import matplotlib

    with matplotlib.rc_context(rc):
        yield


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def draw_plot_report(state: State, spec: Spec) -> bytes:
    """PlotReport's image: one line per key of ``spec['data']`` against ``spec['x_key']``.

    One figure is kept in ``state`` and its lines are updated at each draw, with the legend's
    room beside the axes measured once (a tight bounding box would draw twice).
    """
    data: Mapping[str, list[tuple[float, float]]] = spec["data"]
    identity = (tuple(spec["y_keys"]), spec["x_key"], spec["marker"], spec["grid"], spec["rc"])
    with _rc(spec):
        figure = state.get("figure")
        if figure is None or state.get("identity") != identity:
            figure, axes, lines = plot_report_figure(spec)
            legend = axes.get_legend()
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            renderer = FigureCanvasAgg(figure).get_renderer()  # type: ignore[no-untyped-call]
            width = legend.get_window_extent(renderer).width
            figure.subplots_adjust(right=max(1.0 - (width + 16.0) / figure.bbox.width, 0.3))
            state.update(figure=figure, lines=lines, identity=identity)
        else:
            for key, line in state["lines"].items():
                line.set_data(*_columns(data[key]))
            axes = figure.axes[0]
            axes.relim()
            axes.autoscale_view()
        return _png(figure)


def plot_report_figure(spec: Spec) -> tuple[Any, Any, dict[str, Any]]:
    """A new figure of PlotReport's points: ``(figure, axes, line of each key)``, with the
    legend beside the axes, the grid and the x label."""
    from matplotlib.figure import Figure

    figure = Figure()
    axes = figure.add_subplot()
    lines = {}
    for key in spec["y_keys"]:
        xs, ys = _columns(spec["data"][key])
        (lines[key],) = axes.plot(xs, ys, marker=spec["marker"], label=key)
    axes.legend(bbox_to_anchor=(1.02, 1), loc="upper left", borderaxespad=0.0)
    if spec["grid"]:
        axes.grid()
    axes.set_xlabel(spec["x_key"])
    return figure, axes, lines


def _columns(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [x for x, _ in points], [y for _, y in points]


def draw_variable_statistics(state: State, spec: Spec) -> bytes:
    """VariableStatisticsPlot's image: one panel per key, percentile bands, mean and std.

    ``spec['data']`` has a row per sampled iteration (``spec['idxs']``), a panel per key, and
    per panel the mean, the std (those chosen) and the percentiles of ``spec['sigmas']``.
    """
    from matplotlib.figure import Figure

    with _rc(spec):
        figure = Figure(figsize=variable_statistics_size(spec), layout="constrained")
        draw_variable_statistics_on(figure, spec)
        return _png(figure)


def variable_statistics_size(spec: Spec) -> tuple[float, float]:
    """The figure size of VariableStatisticsPlot's image, in inches."""
    figsize = spec["figsize"]
    return (6.4 * len(spec["keys"]), 4.8) if figsize is None else tuple(figsize)


def draw_variable_statistics_on(figure: Any, spec: Spec) -> None:
    """Draw VariableStatisticsPlot's panels on ``figure`` (any matplotlib figure)."""
    import numpy as np

    keys: list[str] = spec["keys"]
    idxs, data = spec["idxs"], spec["data"]
    sigmas: tuple[float, ...] = spec["sigmas"]
    marker = spec["marker"]
    n_bands = len(sigmas) // 2
    axes_list = figure.subplots(1, len(keys), squeeze=False)[0]
    for k, (key, axes) in enumerate(zip(keys, axes_list, strict=True)):
        rows = data[:, k, :]
        column = 0
        mean = std = None
        if spec["collect_mean"]:
            mean = rows[:, column]
            column += 1
        if spec["collect_std"]:
            std = rows[:, column]
            column += 1
        percentiles = rows[:, column:]
        for band in range(n_bands):
            low, high = percentiles[:, band], percentiles[:, -band - 1]
            label = f"{sigmas[band]:g}-{sigmas[-band - 1]:g} %ile"
            alpha = 0.15 + 0.5 * (band + 1) / (n_bands + 1)
            axes.fill_between(idxs, low, high, color="tab:blue", alpha=alpha, lw=0, label=label)
        if len(sigmas) % 2:
            axes.plot(idxs, percentiles[:, n_bands], color="navy", lw=1, label="median")
        if mean is not None:
            axes.plot(idxs, mean, color="tab:red", marker=marker, label="mean")
        if std is not None:
            center = mean if mean is not None else np.zeros_like(std)
            name = "mean ± std" if mean is not None else "± std"
            for sign in (1, -1):
                axes.plot(
                    idxs,
                    center + sign * std,
                    color="tab:orange",
                    ls="--",
                    marker=marker,
                    label=name if sign == 1 else None,
                )
        axes.set_title(key)
        axes.set_xlabel("iteration")
        if spec["grid"]:
            axes.grid()
    # One legend for all panels, beside them (the panels share their artists' labels).
    handles, labels = axes_list[0].get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside right upper", fontsize="small")


DRAW: dict[str, Callable[[State, Spec], bytes]] = {
    "plot_report": draw_plot_report,
    "variable_statistics": draw_variable_statistics,
}


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The worker's loop: answer each pickled request until the input ends.

    Requests: ``("draw", job, kind, owner, spec)``, answered ``(job, True, png_bytes)`` or
    ``(job, False, traceback_text)``; ``("drop", owner)`` forgets an owner's figure.
    """
    states: dict[int, State] = {}
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        if request[0] == "drop":
            states.pop(request[1], None)
            continue
        _, job, kind, owner, spec = request
        answer: tuple[int, bool, bytes | str]
        try:
            answer = (job, True, DRAW[kind](states.setdefault(owner, {}), spec))
        except BaseException:
            answer = (job, False, traceback.format_exc())
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


def _main() -> None:  # pragma: no cover - runs in the worker process
    import os

    # Answers go to a private copy of stdout; anything printed (warnings, a user's hooks) goes
    # to stderr and cannot corrupt them.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    _main()
