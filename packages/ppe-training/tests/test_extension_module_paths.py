"""The public module paths of ``training.extensions`` and what the new ones hold."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions
from pytorch_pfn_extras.training.extensions import (
    PrintReportCLI,
    ProgressBarCLI,
    log_report,
    plot_report,
    print_report,
    util,
)
from pytorch_pfn_extras.writing import SimpleWriter

# A copy of the "Public module paths" of /work/shared/spec/FEATURES.md for this package.
_SPEC = """
pytorch_pfn_extras.training.extensions: AverageAccumulate, BestValue, DistributedEvaluator, Evaluator, FailOnNonNumber, IgniteEvaluator, LRScheduler, LogReport, MaxAccumulate, MaxValue, MicroAverage, MinAccumulate, MinValue, ParameterStatistics, PlotReport, PrintReport, PrintReportCLI, PrintReportNotebook, ProfileReport, ProgressBar, ProgressBarCLI, ProgressBarNotebook, Slack, SlackWebhook, SnapshotMode, StandardDeviationAccumulate, TimelineTrace, UnbiasedStandardDeviationAccumulate, VariableStatisticsPlot, observe_lr, observe_value, snapshot, snapshot_object
pytorch_pfn_extras.training.extensions.accumulate: AverageAccumulate, MaxAccumulate, MinAccumulate, StandardDeviationAccumulate, UnbiasedStandardDeviationAccumulate
pytorch_pfn_extras.training.extensions.accumulate.average_accumulate: AverageAccumulate
pytorch_pfn_extras.training.extensions.accumulate.max_accumulate: MaxAccumulate
pytorch_pfn_extras.training.extensions.accumulate.min_accumulate: MinAccumulate
pytorch_pfn_extras.training.extensions.accumulate.standard_deviation_accumulate: StandardDeviationAccumulate
pytorch_pfn_extras.training.extensions.accumulate.unbiased_standard_deviation_accumulate: UnbiasedStandardDeviationAccumulate
pytorch_pfn_extras.training.extensions.best_value: BestValue, MaxValue, MinValue
pytorch_pfn_extras.training.extensions.evaluator: DistributedEvaluator, Evaluator, IgniteEvaluator, IterationStatus
pytorch_pfn_extras.training.extensions.fail_on_non_number: FailOnNonNumber
pytorch_pfn_extras.training.extensions.log_report: LogReport, LogWriterSaveFunc
pytorch_pfn_extras.training.extensions.lr_scheduler: LRScheduler
pytorch_pfn_extras.training.extensions.micro_average: MicroAverage
pytorch_pfn_extras.training.extensions.parameter_statistics: ParameterStatistics
pytorch_pfn_extras.training.extensions.plot_report: PlotReport, matplotlib_savefun
pytorch_pfn_extras.training.extensions.print_report: PrintReport, create_header_and_templates, filter_and_sort_entries
pytorch_pfn_extras.training.extensions.print_report_notebook: PrintReportNotebook
pytorch_pfn_extras.training.extensions.profile_report: ProfileReport
pytorch_pfn_extras.training.extensions.progress_bar: ProgressBar
pytorch_pfn_extras.training.extensions.progress_bar_notebook: ProgressBarNotebook
pytorch_pfn_extras.training.extensions.slack: Slack, SlackWebhook
pytorch_pfn_extras.training.extensions.snapshot_writers: ProcessQueueWriter, ProcessWriter, QueueWriter, SimpleWriter, StandardWriter, TensorBoardWriter, ThreadQueueWriter, ThreadWriter, Writer
pytorch_pfn_extras.training.extensions.timeline_trace: TimelineTrace
pytorch_pfn_extras.training.extensions.util: ProgressBar
pytorch_pfn_extras.training.extensions.value_observation: observe_lr, observe_value
pytorch_pfn_extras.training.extensions.variable_statistics_plot: Reservoir, Statistician, VariableStatisticsPlot, matplotlib_savefun, percentile
"""
_PACKAGE = "pytorch_pfn_extras.training.extensions"
_PATHS = {
    module: [name.strip() for name in names.split(",")]
    for module, names in (line.split(": ") for line in _SPEC.strip().splitlines())
}

_OPTIONAL = ("matplotlib", "pandas", "yaml", "ipywidgets", "slack_sdk")


@pytest.mark.parametrize(
    ("module", "name"),
    [
        pytest.param(module, name, id=f"{module}:{name}")
        for module, names in _PATHS.items()
        for name in names
    ],
)
def test_module_path_holds_the_name(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    "module",
    [pytest.param(module, id=module) for module in _PATHS if module != _PACKAGE],
)
def test_module_path_exports_exactly_the_listed_names(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == sorted(_PATHS[module])
    package_names = set(_PATHS[_PACKAGE])
    for name in set(_PATHS[module]) & package_names:
        if name in extensions.__all__ and not module.endswith(".util"):
            assert getattr(imported, name) is getattr(extensions, name)


_IMPORT_PROBE = """
import importlib, json, sys
optional = {optional!r}
found = {{}}
for module in {modules!r}:
    try:
        importlib.import_module(module)
    except ImportError as error:
        found[module] = "ImportError: " + str(error)
        continue
    found[module] = sorted(name for name in optional if name in sys.modules)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def optional_imports() -> dict[str, object]:
    """What each module path imported of the optional dependencies, in one interpreter."""
    modules = [_PACKAGE] + [m for m in _PATHS if m != _PACKAGE and importlib.util.find_spec(m)]
    probe = _IMPORT_PROBE.format(optional=_OPTIONAL, modules=modules)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(probe)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return found


@pytest.mark.parametrize("module", list(_PATHS))
def test_importing_does_not_import_optional_dependencies(
    optional_imports: dict[str, object], module: str
) -> None:
    # Modules are imported one after the other: the first one to import a dependency fails.
    assert optional_imports.get(module) == []


def test_cli_variants_print_what_the_base_classes_print_to_out(tmp_path: Path) -> None:
    outputs = []
    for cls in (extensions.PrintReport, PrintReportCLI):
        out = io.StringIO()
        manager = ExtensionsManager({}, {}, 2, iters_per_epoch=3, out_dir=tmp_path)
        manager.extend(extensions.LogReport())
        manager.extend(cls(["epoch", "iteration", "loss"], out=out))
        while not manager.stop_trigger:
            with manager.run_iteration():
                reporting.report({"loss": 1.0 / (manager.iteration + 1)})
        outputs.append(out.getvalue())
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) == 3

    bar = ProgressBarCLI((1, "epoch"), update_interval=3, bar_length=10, out=io.StringIO())
    assert type(bar) is ProgressBarCLI
    assert isinstance(bar, extensions.ProgressBar)


def test_log_writer_save_func_encodes_the_log_or_its_last_entry(tmp_path: Path) -> None:
    entries = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25}]
    writer = SimpleWriter()
    writer("log", str(tmp_path), entries, savefun=log_report.LogWriterSaveFunc("json", False))
    assert json.loads((tmp_path / "log").read_text()) == entries
    savefun = log_report.LogWriterSaveFunc("json-lines", True)
    writer("log.jsonl", str(tmp_path), entries[:1], savefun=savefun, append=True)
    writer("log.jsonl", str(tmp_path), entries, savefun=savefun, append=True)
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == entries


@pytest.mark.parametrize(("fmt", "append"), [("json", True), ("xml", False)])
def test_log_writer_save_func_rejects_what_cannot_be_written(fmt: str, append: bool) -> None:
    with pytest.raises(ValueError, match=repr(fmt) if fmt == "xml" else "append"):
        log_report.LogWriterSaveFunc(fmt, append)


def test_header_and_templates_lay_out_the_table_print_report_prints(tmp_path: Path) -> None:
    entries = ["epoch", "main/accuracy_of_the_model"]
    header, templates = print_report.create_header_and_templates(entries)
    out = io.StringIO()
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    manager.extend(extensions.LogReport())
    manager.extend(extensions.PrintReport(entries, out=out))
    while not manager.stop_trigger:
        with manager.run_iteration():
            reporting.report({"main/accuracy_of_the_model": 0.5})
    printed_header, printed_row = out.getvalue().splitlines()
    assert header.endswith("\n")
    assert header.rstrip() == printed_header
    assert [key for key, _, _ in templates] == entries
    row = "".join(template.format(value) for (_, template, _), value in zip(templates, [1, 0.5]))
    assert row.rstrip() == printed_row
    assert [len(empty) for _, _, empty in templates] == [12, 28]


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("epoch", ["epoch", "loss", "elapsed_time"]),
        ("iteration", ["iteration", "loss", "elapsed_time"]),
    ],
)
def test_filter_and_sort_entries_leads_with_the_unit(unit: str, expected: list[str]) -> None:
    keys = ["loss", "iteration", "epoch", "elapsed_time"]
    assert print_report.filter_and_sort_entries(keys, unit=unit) == expected
    assert print_report.filter_and_sort_entries(["loss"], unit=unit) == ["loss"]
    with pytest.raises(ValueError, match="'step'"):
        print_report.filter_and_sort_entries(keys, unit="step")


def test_matplotlib_savefun_writes_a_png_and_closes_the_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure = pyplot.figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    SimpleWriter()(
        "plot.png", str(tmp_path), (figure, pyplot), savefun=plot_report.matplotlib_savefun
    )
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert not pyplot.fignum_exists(figure.number)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Counter(util.ProgressBar):
    count = 0

    def get_lines(self) -> list[str]:
        return [f"{self.count} items", "done\n"]


def test_util_progress_bar_redraws_in_place_on_a_terminal() -> None:
    terminal, log = _Terminal(), io.StringIO()
    for out in (terminal, log):
        bar = _Counter(out)
        bar.update()
        bar.count = 1
        bar.update()
        bar.close()
    assert terminal.getvalue() == "\x1b[J0 items\ndone\n\x1b[2A\x1b[J1 items\ndone\n\x1b[2A\x1b[J"
    assert log.getvalue() == "0 items\ndone\n1 items\ndone\n"


def test_util_progress_bar_measures_the_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # a clock the test moves
    bar = _Counter(io.StringIO())
    assert bar.update_speed(0, 0.0) == (float("inf"), float("inf"))
    now[0] += 2.0
    assert bar.update_speed(10, 0.5) == (5.0, 0.25)
    now[0] += 3.0
    assert bar.update_speed(40, 2.0) == (8.0, 0.4)  # since the oldest of the last 10 calls


def test_util_progress_bar_needs_the_lines_from_a_subclass() -> None:
    with pytest.raises(NotImplementedError, match="get_lines"):
        util.ProgressBar(io.StringIO()).update()
