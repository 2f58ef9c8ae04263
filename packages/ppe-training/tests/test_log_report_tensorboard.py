"""LogReport writes through any writer: a TensorBoardWriter gets the entries themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytorch_pfn_extras.reporting import report
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport
from pytorch_pfn_extras.writing import TensorBoardWriter


def test_log_report_with_a_tensorboard_writer_logs_each_entry(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(out_dir=str(tmp_path / "tb"))
    manager = ExtensionsManager(
        {}, [], 3, iters_per_epoch=2, out_dir=str(tmp_path), extensions=[LogReport(writer=writer)]
    )
    step = 0
    while not manager.stop_trigger:
        with manager.run_iteration():
            step += 1
            report({"main/loss": torch.tensor(1.0 / step)})
    accumulator = EventAccumulator(str(tmp_path / "tb"))
    accumulator.Reload()
    losses = [(e.step, e.value) for e in accumulator.Scalars("main/loss")]
    assert [step for step, _ in losses] == [2, 4, 6]
    # the mean of 1/iteration over each epoch's two iterations
    assert [value for _, value in losses] == pytest.approx(
        [(1 + 1 / 2) / 2, (1 / 3 + 1 / 4) / 2, (1 / 5 + 1 / 6) / 2]
    )
