"""The notebook variants of PrintReport and ProgressBar, run in a real Jupyter kernel."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

_TRAIN = """
import sys, tempfile
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions

report = extensions.PrintReport(["epoch", "iteration", "loss"])
bar = extensions.ProgressBar(update_interval=2)
manager = ExtensionsManager({}, {}, 2, iters_per_epoch=3, out_dir=tempfile.mkdtemp(),
                            extensions=[extensions.LogReport(), report, bar])
while not manager.stop_trigger:
    with manager.run_iteration():
        reporting.report({"loss": 1.0 / (manager.iteration + 1)})
print(type(report).__name__, type(bar).__name__)
"""

_CLI = """
from pytorch_pfn_extras.training.extensions import PrintReportCLI, ProgressBarCLI
print(type(PrintReportCLI()).__name__, type(ProgressBarCLI()).__name__,
      type(extensions.PrintReport(out=sys.stdout)).__name__)
"""


def _run_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *sources: str) -> Any:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # silences jupyter_core's migration warning
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(textwrap.dedent(s).strip()) for s in sources]
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,  # per cell
        startup_timeout=60,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return notebook


def _stream(cell: Any) -> str:
    return "".join(o["text"] for o in cell["outputs"] if o["output_type"] == "stream")


def test_notebook_variants_display_widgets_in_a_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = _run_notebook(tmp_path, monkeypatch, _TRAIN, _CLI)
    train, cli = notebook.cells

    assert _stream(train) == "PrintReportNotebook ProgressBarNotebook\n"
    views = [o["data"][_WIDGET_VIEW] for o in train["outputs"] if _WIDGET_VIEW in o.get("data", {})]
    assert len(views) == 2  # the table and the box of bars, displayed once each

    # nbclient keeps the widgets' last state: the table holds the entries, the bars are full.
    state = notebook.metadata["widgets"][_WIDGET_STATE]["state"]
    html_view, box_view = (state[view["model_id"]] for view in views)
    assert html_view["model_name"] == "HTMLModel"
    table = html_view["state"]["value"]
    assert "<th>loss</th>" in table
    assert "<td>1</td><td>3</td>" in table
    assert "<td>2</td><td>6</td>" in table
    assert box_view["model_name"] == "VBoxModel"
    total, epoch, status = (
        state[ref.removeprefix("IPY_MODEL_")] for ref in box_view["state"]["children"]
    )
    assert (total["state"]["value"], epoch["state"]["value"]) == (1.0, 1.0)
    assert status["state"]["value"].startswith("6 iter, 2 epoch / 2 epochs<br>")

    # The CLI variants stay text in the kernel; so does PrintReport given an out stream.
    assert _stream(cli) == "PrintReportCLI ProgressBarCLI PrintReport\n"
    assert not any(_WIDGET_VIEW in o.get("data", {}) for o in cli["outputs"])
