"""PrintReport and PrintReportNotebook: the table of LogReport entries."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, make_extension
from pytorch_pfn_extras.training.extensions import (
    LogReport,
    PrintReport,
    PrintReportNotebook,
)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _train(
    tmp_path: Path,
    extensions: list[Any],
    epochs: int = 3,
    iters_per_epoch: int = 4,
    values: Any = None,
    manager: ExtensionsManager | None = None,
) -> ExtensionsManager:
    if manager is None:
        manager = ExtensionsManager(
            {}, {}, epochs, iters_per_epoch=iters_per_epoch, out_dir=tmp_path, extensions=extensions
        )
    while not manager.stop_trigger:
        with manager.run_iteration():
            i = manager.iteration + 1
            reporting.report(values(i) if values else {"loss": 1.0 / i, "acc": i / 100})
    return manager


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_prints_a_header_and_one_row_per_log_entry(tmp_path: Path) -> None:
    out = io.StringIO()
    _train(tmp_path, [LogReport(), PrintReport(["epoch", "iteration", "loss"], out=out)])
    lines = _lines(out)
    assert lines[0].split() == ["epoch", "iteration", "loss"]
    rows = [line.split() for line in lines[1:]]
    assert [row[:2] for row in rows] == [["1", "4"], ["2", "8"], ["3", "12"]]
    means = [sum(1.0 / i for i in range(k * 4 + 1, k * 4 + 5)) / 4 for k in range(3)]
    assert [float(row[2]) for row in rows] == pytest.approx(means, rel=1e-5)
    # Columns are aligned: every value starts where its header starts.
    start = lines[0].index("loss")
    assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines[1:])


def test_default_entries_show_every_key_with_the_unit_counter_first(tmp_path: Path) -> None:
    out = io.StringIO()
    _train(tmp_path, [LogReport(), PrintReport(out=out)], epochs=1)
    assert _lines(out)[0].split() == ["epoch", "loss", "acc", "elapsed_time"]


def test_header_is_printed_again_when_a_new_key_appears(tmp_path: Path) -> None:
    out = io.StringIO()

    def values(i: int) -> dict[str, float]:
        return {"loss": 1.0} if i <= 4 else {"loss": 1.0, "val/acc": 0.5}

    _train(tmp_path, [LogReport(), PrintReport(out=out)], epochs=2, values=values)
    lines = _lines(out)
    assert lines[0].split() == ["epoch", "loss", "elapsed_time"]
    assert lines[2].split() == ["epoch", "loss", "val/acc", "elapsed_time"]
    assert lines[3].split()[:3] == ["2", "1", "0.5"]


def test_missing_values_leave_blank_cells(tmp_path: Path) -> None:
    out = io.StringIO()
    _train(tmp_path, [LogReport(), PrintReport(["epoch", "nothing", "loss"], out=out)], epochs=1)
    header, row = _lines(out)
    assert row[: header.index("loss")].split() == ["1"]


def test_drives_a_log_report_instance_of_its_own(tmp_path: Path) -> None:
    out = io.StringIO()
    log_report = LogReport(trigger=(2, "iteration"), filename="own_log")
    _train(tmp_path, [PrintReport(["iteration", "loss"], log_report=log_report, out=out)], epochs=1)
    assert [line.split()[0] for line in _lines(out)[1:]] == ["2", "4"]
    assert (tmp_path / "own_log").exists()


def test_prints_pending_entries_when_training_ends(tmp_path: Path) -> None:
    out = io.StringIO()
    # Registered before the LogReport: the last entry is printed by the finalizer.
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=4, out_dir=tmp_path)
    manager.extend(PrintReport(["epoch"], out=out))
    manager.extend(LogReport())
    _train(tmp_path, [], manager=manager)
    assert _lines(out) == ["epoch", "1", "2"]


def test_resumed_run_prints_only_the_new_entries(tmp_path: Path) -> None:
    first = io.StringIO()
    manager = ExtensionsManager(
        {}, {}, 4, iters_per_epoch=2, out_dir=tmp_path, extensions=[LogReport()]
    )
    manager.extend(PrintReport(["epoch", "loss"], out=first))
    for _ in range(5):
        with manager.run_iteration():
            reporting.report({"loss": 2.0})
    state = manager.state_dict()

    second = io.StringIO()
    resumed = ExtensionsManager(
        {}, {}, 4, iters_per_epoch=2, out_dir=tmp_path, extensions=[LogReport()]
    )
    resumed.extend(PrintReport(["epoch", "loss"], out=second))
    resumed.load_state_dict(state)
    _train(tmp_path, [], manager=resumed, values=lambda i: {"loss": 2.0})
    assert [line.split()[0] for line in _lines(first)] == ["epoch", "1", "2"]
    assert [line.split()[0] for line in _lines(second)] == ["epoch", "3", "4"]


def test_clears_a_progress_bar_drawn_on_a_terminal(tmp_path: Path) -> None:
    out = _Terminal()
    _train(tmp_path, [LogReport(), PrintReport(["epoch"], out=out)], epochs=1)
    assert out.getvalue() == "\x1b[Jepoch\n1\n"


def test_default_stream_is_the_current_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _train(tmp_path, [LogReport(), PrintReport(["epoch", "iteration"])], epochs=2)
    assert capsys.readouterr().out.split() == ["epoch", "iteration", "1", "4", "2", "8"]


def test_rejects_a_log_report_that_is_not_one(tmp_path: Path) -> None:
    @make_extension()
    def not_a_log(manager: Any) -> None:
        pass

    manager = ExtensionsManager(
        {}, {}, 1, iters_per_epoch=2, out_dir=tmp_path, extensions=[not_a_log]
    )
    manager.extend(PrintReport(log_report="not_a_log", out=io.StringIO()))
    with pytest.raises(TypeError, match="'not_a_log' is a function, not a LogReport"):
        _train(tmp_path, [], manager=manager)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"entries": "loss"}, TypeError, "entries must be a sequence of keys, got the str 'loss'"),
        ({"log_report": 3}, TypeError, "log_report must be the name of a LogReport"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PrintReport(**kwargs)


def test_notebook_variant_renders_an_html_table(tmp_path: Path) -> None:
    report = PrintReportNotebook(["epoch", "loss"])
    _train(tmp_path, [LogReport(), report], epochs=2)
    html = report.widget.value
    assert html.count("<tr>") == 3  # header and two entries
    assert "<th>epoch</th><th>loss</th>" in html
    assert "<td>2</td>" in html


def test_notebook_variant_without_ipywidgets_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.raises(ImportError, match=r'pip install "ppe-training\[notebook\]"'):
        PrintReportNotebook()


_NOTEBOOK_PROBE = """
import sys
import tempfile

from pytorch_pfn_extras.training import ExtensionsManager, extensions

before = [m for m in ("IPython", "ipywidgets") if m in sys.modules]
plain = (type(extensions.PrintReport()).__name__, type(extensions.ProgressBar()).__name__)
after = [m for m in ("IPython", "ipywidgets") if m in sys.modules]
print("outside", plain, before, after)

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

config = Config()
config.IPKernelApp.connection_file = "kernel.json"  # what a Jupyter kernel's shell carries
config.HistoryManager.enabled = False
InteractiveShell.instance(config=config)
report, bar = extensions.PrintReport(["epoch"]), extensions.ProgressBar(update_interval=2)
explicit = extensions.PrintReport(out=sys.stderr)
print("kernel", type(report).__name__, type(bar).__name__, type(explicit).__name__)
manager = ExtensionsManager({}, {}, 2, iters_per_epoch=3, out_dir=tempfile.mkdtemp(),
                            extensions=[extensions.LogReport(), report, bar])
while not manager.stop_trigger:
    with manager.run_iteration():
        pass
print("html", report.widget.value)
print("bar", bar.total_bar.value, bar.epoch_bar.value, bar.status.value)
"""


def test_picks_the_notebook_variants_inside_a_jupyter_kernel_only() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_NOTEBOOK_PROBE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # The shell has no frontend: display() prints the widgets' reprs, which are skipped.
    tags = ("outside", "kernel", "html", "bar")
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(tags))
    assert "HTML(value=" in result.stdout  # the widgets were displayed
    assert lines["outside"] == "('PrintReport', 'ProgressBar') [] []"
    assert lines["kernel"] == "PrintReportNotebook ProgressBarNotebook PrintReport"
    assert "<td>1</td>" in lines["html"]
    assert "<td>2</td>" in lines["html"]
    total, epoch, status = lines["bar"].split(" ", 2)
    assert (float(total), float(epoch)) == (1.0, 1.0)
    assert status.startswith("6 iter, 2 epoch / 2 epochs<br>")


def test_default_stream_follows_a_later_redirection(tmp_path: Path) -> None:
    report = PrintReport(["epoch", "iteration"])  # created before the redirection
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _train(tmp_path, [LogReport(), report], epochs=2)
    assert buffer.getvalue().split() == ["epoch", "iteration", "1", "4", "2", "8"]
