"""TensorBoardWriter, checked with tensorboard's own event reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from pytorch_pfn_extras.writing import TensorBoardWriter


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_log_entries_are_read_back_by_tensorboard(tmp_path: Path) -> None:
    log: list[dict[str, Any]] = []
    writer = TensorBoardWriter(out_dir=str(tmp_path / "tb"))
    for iteration in (10, 20, 30):
        log.append({"epoch": iteration // 10, "iteration": iteration, "main/loss": 1 / iteration})
        writer("log", "result", log)  # LogReport passes its whole log: the last entry counts
    writer.finalize()
    scalars = read_scalars(tmp_path / "tb")
    assert sorted(scalars) == ["epoch", "iteration", "main/loss"]
    assert scalars["epoch"] == [(10, 1.0), (20, 2.0), (30, 3.0)]
    assert [step for step, _ in scalars["main/loss"]] == [10, 20, 30]
    assert [value for _, value in scalars["main/loss"]] == pytest.approx([0.1, 0.05, 1 / 30])
    assert not (tmp_path / "result").exists()


def test_stats_selects_the_keys_written(tmp_path: Path) -> None:
    writer = TensorBoardWriter(out_dir=str(tmp_path), stats=["main/loss"])
    writer("log", "", {"iteration": 1, "main/loss": 0.5, "val/loss": 0.7})
    writer.finalize()
    assert read_scalars(tmp_path) == {"main/loss": [(1, 0.5)]}


def test_only_real_scalars_are_written(tmp_path: Path) -> None:
    entry = {
        "iteration": numpy.int64(3),
        "int": 2,
        "flag": True,
        "np_float": numpy.float32(0.25),
        "np_one": numpy.array([1.5]),
        "tensor_0d": torch.tensor(4.0, dtype=torch.float64),
        "tensor_one": torch.tensor([[5]]),
        "text": "skipped",
        "vector": torch.ones(3),
        "complex": torch.tensor(1 + 2j),
        "np_text": numpy.array(["a"]),
        "none": None,
    }
    writer = TensorBoardWriter(out_dir=str(tmp_path))
    writer("log", "", entry)
    writer.finalize()
    assert read_scalars(tmp_path) == {
        "iteration": [(3, 3.0)],
        "int": [(3, 2.0)],
        "flag": [(3, 1.0)],
        "np_float": [(3, 0.25)],
        "np_one": [(3, 1.5)],
        "tensor_0d": [(3, 4.0)],
        "tensor_one": [(3, 5.0)],
    }


def test_initialize_does_not_move_the_event_files(tmp_path: Path) -> None:
    writer = TensorBoardWriter(out_dir=str(tmp_path / "tb"))
    writer.initialize(str(tmp_path / "result"))  # what the training manager does
    writer("log", str(tmp_path / "result"), {"iteration": 1, "loss": 1.0})
    writer.finalize()
    assert read_scalars(tmp_path / "tb") == {"iteration": [(1, 1.0)], "loss": [(1, 1.0)]}
    assert not (tmp_path / "result").exists()


def test_log_dir_defaults_to_the_call_out_dir_and_finalize_can_resume(tmp_path: Path) -> None:
    writer = TensorBoardWriter()
    writer("log", str(tmp_path), {"iteration": 1, "loss": 1.0})
    writer.finalize()
    writer("log", str(tmp_path), {"iteration": 2, "loss": 0.5})  # a new event file
    writer.finalize()
    writer.finalize()
    assert read_scalars(tmp_path)["loss"] == [(1, 1.0), (2, 0.5)]


@pytest.mark.parametrize("target", [3, "loss", [1, 2], torch.ones(2), [], (1,), None])
def test_non_dict_target_is_a_type_error(tmp_path: Path, target: Any) -> None:
    writer = TensorBoardWriter(out_dir=str(tmp_path))
    with pytest.raises(TypeError, match="target must be a dict of scalars"):
        writer("log", "", target)
    writer.finalize()
    assert list(tmp_path.iterdir()) == []


def test_entry_without_iteration_is_a_value_error(tmp_path: Path) -> None:
    writer = TensorBoardWriter(out_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"needs an 'iteration' entry.*\['epoch', 'loss'\]"):
        writer("log", "", {"loss": 1.0, "epoch": 1})


@pytest.mark.parametrize("stats", ["main/loss", 5])
def test_bad_stats_is_a_type_error(stats: Any) -> None:
    with pytest.raises(TypeError, match="stats must be an iterable of keys or None"):
        TensorBoardWriter(stats=stats)


def test_without_tensorboard_it_warns_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in sys.modules if name.startswith("torch.utils.tensorboard")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # makes `import tensorboard` fail
    with pytest.warns(UserWarning, match=r'pip install "ppe-core\[tensorboard\]"'):
        writer = TensorBoardWriter(out_dir=str(tmp_path / "tb"))
    writer("log", "", {"iteration": 1, "loss": 1.0})
    with pytest.raises(TypeError, match="must be a dict"):
        writer("log", "", 1.0)
    writer.finalize()
    assert not (tmp_path / "tb").exists()


def test_importing_writing_is_cheap() -> None:
    code = (
        "import sys, pytorch_pfn_extras.writing\n"
        "heavy = [m for m in ('tensorboard', 'torch.utils.tensorboard', 'torch._dynamo')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
