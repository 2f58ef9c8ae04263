"""PPE 0.9 user code: failed background writes, and the workers of the standard writers."""

from __future__ import annotations

import importlib
import multiprocessing
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import writing

HERE = Path(__file__).resolve().parent


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # Importable by module name, so that spawned writer processes can unpickle it.
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("writing_helpers")


@pytest.mark.parametrize(
    ("writer_class", "code"), [(writing.ThreadWriter, -1), (writing.ProcessWriter, 1)]
)
def test_a_failed_write_is_a_non_zero_exit_code_at_finalize(
    tmp_path: Path, helpers: ModuleType, writer_class: type[writing.StandardWriter], code: int
) -> None:
    writer = writer_class(savefun=helpers.failing_save)
    writer("snapshot", str(tmp_path), {"w": torch.ones(2)})
    with pytest.raises(RuntimeError, match=rf"^exit code is non-zero: {code} ") as info:
        writer.finalize()
    # The report names the file and chains what the save raised.
    assert repr(str(tmp_path / "snapshot")) in str(info.value)
    assert "SaveFailedError: cannot save a dict" in str(info.value)
    assert type(info.value.__cause__) is helpers.SaveFailedError
    assert not (tmp_path / "snapshot").exists()
    writer.finalize()  # reported once


@pytest.mark.parametrize(
    ("writer_class", "code"), [(writing.ThreadWriter, -1), (writing.ProcessWriter, 1)]
)
def test_a_failed_write_is_a_non_zero_exit_code_at_the_next_write(
    tmp_path: Path, helpers: ModuleType, writer_class: type[writing.StandardWriter], code: int
) -> None:
    writer = writer_class()
    writer("bad", str(tmp_path), [1], savefun=helpers.failing_save)
    with pytest.raises(RuntimeError, match=rf"^exit code is non-zero: {code} .*/bad'"):
        writer("good", str(tmp_path), [2])
    assert not (tmp_path / "good").exists()  # the failure stopped the next write
    writer("good", str(tmp_path), [2])
    writer.finalize()
    assert torch.load(tmp_path / "good") == [2]


def test_a_killed_process_writer_reports_the_signal_as_its_exit_code(
    tmp_path: Path, helpers: ModuleType
) -> None:
    writer = writing.ProcessWriter(savefun=helpers.suicidal_save)
    writer("snapshot", str(tmp_path), 1)
    with pytest.raises(RuntimeError, match=r"^exit code is non-zero: -9 .*killed by signal 9"):
        writer.finalize()


def test_thread_writer_create_worker_returns_a_thread_with_an_exit_code(
    tmp_path: Path, helpers: ModuleType
) -> None:
    writer = writing.ThreadWriter()
    worker = writer.create_worker("ok", str(tmp_path), {"step": 1})
    assert isinstance(worker, threading.Thread)
    assert not worker.is_alive()
    worker.start()
    worker.join()
    assert worker.exitcode == 0  # type: ignore[attr-defined]
    assert torch.load(tmp_path / "ok") == {"step": 1}

    failing = writer.create_worker("bad", str(tmp_path), {}, savefun=helpers.failing_save)
    failing.start()
    failing.join()
    assert failing.exitcode == -1  # type: ignore[attr-defined]
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(
    ("mp_context", "started_by"),
    [("fork", "the test's process"), ("spawn", "a fresh interpreter")],
)
def test_process_writer_create_worker_returns_a_multiprocessing_process(
    tmp_path: Path,
    helpers: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    mp_context: str,
    started_by: str,
) -> None:
    monkeypatch.setattr(helpers, "started_by", "the test's process")
    writer = writing.ProcessWriter(savefun=helpers.save_with_origin, mp_context=mp_context)
    weights = torch.arange(4.0)
    process = writer.create_worker("ok", str(tmp_path), {"w": weights})
    assert isinstance(process, multiprocessing.Process)
    assert process.pid is None  # not started
    weights.add_(1.0)  # the copy taken by create_worker is written

    process.start()
    process.join()

    assert process.exitcode == 0
    saved = torch.load(tmp_path / "ok")
    torch.testing.assert_close(saved["target"]["w"], torch.arange(4.0))
    assert saved["started_by"] == started_by  # it ran in the writer's mp_context


def test_process_writer_worker_exits_with_code_one_when_the_write_fails(
    tmp_path: Path, helpers: ModuleType
) -> None:
    writer = writing.ProcessWriter()
    process = writer.create_worker("bad", str(tmp_path), {}, savefun=helpers.failing_save)
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 1
    assert not (tmp_path / "bad").exists()


def test_a_user_subclass_gets_the_process_writer_process_and_its_failures(
    tmp_path: Path, helpers: ModuleType
) -> None:
    started: list[multiprocessing.Process] = []

    class RecordingProcessWriter(writing.ProcessWriter):
        def create_worker(self, *args: Any, **kwargs: Any) -> multiprocessing.Process:
            process = super().create_worker(*args, **kwargs)
            started.append(process)
            return process

    writer = RecordingProcessWriter(savefun=helpers.failing_save)
    writer("bad", str(tmp_path), {})
    with pytest.raises(RuntimeError, match=r"^exit code is non-zero: 1 "):
        writer.finalize()
    (process,) = started
    assert process.exitcode == 1


@pytest.mark.gpu
@pytest.mark.parametrize("mp_context", ["fork", "spawn"])
def test_process_writer_process_writes_a_copy_of_cuda_tensors(
    tmp_path: Path, helpers: ModuleType, mp_context: str
) -> None:
    writer = writing.ProcessWriter(mp_context=mp_context)
    weights = torch.arange(4.0, device="cuda")
    process = writer.create_worker("ok", str(tmp_path), {"w": weights})
    assert isinstance(process, multiprocessing.Process)
    weights.add_(1.0)
    process.start()
    process.join()
    assert process.exitcode == 0
    torch.testing.assert_close(torch.load(tmp_path / "ok")["w"], torch.arange(4.0))
    writer("bad", str(tmp_path), {"w": weights}, savefun=helpers.failing_save)
    with pytest.raises(RuntimeError, match=r"^exit code is non-zero: 1 "):
        writer.finalize()
