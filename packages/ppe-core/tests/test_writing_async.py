"""Asynchronous writers: consistent copies, ordering, failures, start methods."""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from pytorch_pfn_extras.writing import (
    ProcessQueueWriter,
    ProcessWriter,
    QueueWriter,
    RemoteTraceback,
    ThreadQueueWriter,
    ThreadWriter,
    Writer,
    is_temporary_file,
)

HERE = Path(__file__).resolve().parent
ASYNC_WRITERS = [ThreadWriter, ProcessWriter, ThreadQueueWriter, ProcessQueueWriter]
PROCESS_WRITERS = [ProcessWriter, ProcessQueueWriter]
ids = [cls.__name__ for cls in ASYNC_WRITERS]
process_ids = [cls.__name__ for cls in PROCESS_WRITERS]


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # Importable by module name, so that spawned writer processes can unpickle it.
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("writing_helpers")


def _training_state() -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "history": [1.0, 2.0],
        "step": 2,
    }
    return model, optimizer, state


def _keep_training(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Mutate everything the saved state refers to, in place."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(100.0)
    optimizer.zero_grad()
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()  # updates exp_avg/exp_avg_sq/step tensors in place
    state["history"].append(3.0)
    state["optimizer"]["param_groups"][0]["lr"] = 0.5


def _assert_same_state(loaded: Any, expected: Any) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(loaded, torch.Tensor) and loaded.device.type == "cpu"
        assert torch.equal(loaded, expected.cpu())
    elif isinstance(expected, dict):
        assert list(loaded) == list(expected)
        for key in expected:
            _assert_same_state(loaded[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert len(loaded) == len(expected)
        for got, want in zip(loaded, expected):
            _assert_same_state(got, want)
    else:
        assert loaded == expected


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_saves_the_state_as_of_the_call_despite_in_place_updates(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    model, optimizer, state = _training_state()
    expected = copy.deepcopy(state)
    writer = writer_class(savefun=helpers.slow_save)  # type: ignore[call-arg]
    writer("snapshot", str(tmp_path), state)
    _keep_training(model, optimizer, state)
    writer.finalize()
    loaded = torch.load(tmp_path / "snapshot")
    _assert_same_state(loaded, expected)
    assert not torch.equal(loaded["model"]["0.weight"], model.state_dict()["0.weight"])
    # The copy is a real state dict: it loads back into a model.
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fresh.load_state_dict(loaded["model"])
    assert torch.equal(fresh[0].weight, expected["model"]["0.weight"])


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_writes_every_target_and_the_last_one_wins(
    tmp_path: Path, writer_class: type[Writer]
) -> None:
    tensor = torch.zeros(3)
    with writer_class() as writer:  # type: ignore[call-arg]
        for i in range(4):
            tensor.fill_(i)
            writer(f"snap_{i}", str(tmp_path), {"i": i, "t": tensor})
            writer("latest", str(tmp_path), {"i": i, "t": tensor})
    for i in range(4):
        loaded = torch.load(tmp_path / f"snap_{i}")
        assert loaded["i"] == i and torch.equal(loaded["t"], torch.full((3,), float(i)))
    assert torch.load(tmp_path / "latest")["i"] == 3
    assert sorted(os.listdir(tmp_path)) == sorted(["latest"] + [f"snap_{i}" for i in range(4)])


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_copy_keeps_shared_storage_views_parameters_and_metadata(
    tmp_path: Path, writer_class: type[Writer]
) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    param = torch.nn.Parameter(torch.ones(2))
    model = torch.nn.Linear(2, 2)
    target = {
        "base": base,
        "same": base,
        "view": base[1:, ::2],
        "param": param,
        "grad": torch.ones(2, requires_grad=True),
        "model": model.state_dict(),
        "nested": ({"x": [base]}, torch.Size([2, 3]), torch.float16),
        "empty": torch.empty(0, 5),
        "int": torch.tensor([1, 2], dtype=torch.int64),
    }
    with writer_class() as writer:  # type: ignore[call-arg]
        writer("t.pt", str(tmp_path), target)
    loaded = torch.load(tmp_path / "t.pt")
    assert loaded["base"] is loaded["same"] is loaded["nested"][0]["x"][0]
    assert (
        loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    )
    assert torch.equal(loaded["view"], base[1:, ::2])
    assert loaded["view"].stride() == base[1:, ::2].stride()
    assert isinstance(loaded["param"], torch.nn.Parameter) and loaded["param"].requires_grad
    assert loaded["grad"].requires_grad and not isinstance(loaded["grad"], torch.nn.Parameter)
    assert loaded["model"]._metadata == model.state_dict()._metadata
    assert loaded["nested"][1:] == (torch.Size([2, 3]), torch.float16)
    assert loaded["empty"].shape == (0, 5) and loaded["int"].tolist() == [1, 2]


# As in PPE 0.9, a thread or process writer reports a failed write as the non-zero exit code
# of its worker (-1 for a thread that raised, 1 for a process); the error the write raised is
# the report's ``__cause__``. Queue writers raise the write's error itself.
EXIT_CODES = {ThreadWriter: -1, ProcessWriter: 1}


def _raises_write_failure(
    writer_class: type[Writer], error: type[BaseException], match: str | None = None
) -> Any:
    """``pytest.raises`` for what a failed write of ``writer_class`` raises."""
    if writer_class not in EXIT_CODES:
        return pytest.raises(error, match=match)
    prefix = rf"^exit code is non-zero: {EXIT_CODES[writer_class]} \({writer_class.__name__}"
    return pytest.raises(
        RuntimeError, match=rf"{prefix} failed to write .*{error.__name__}: .*{match or ''}"
    )


def _error_of_the_write(writer_class: type[Writer], raised: BaseException) -> BaseException:
    if writer_class not in EXIT_CODES:
        return raised
    assert type(raised) is RuntimeError
    assert raised.__cause__ is not None
    return raised.__cause__


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_failure_is_raised_on_finalize_with_the_original_error(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    (tmp_path / "f.pt").write_bytes(b"previous")
    writer = writer_class(savefun=helpers.failing_save)  # type: ignore[call-arg]
    writer("f.pt", str(tmp_path), {"a": 1})
    with _raises_write_failure(writer_class, helpers.SaveFailedError) as info:
        writer.finalize()
    error = _error_of_the_write(writer_class, info.value)
    assert type(error) is helpers.SaveFailedError
    assert str(error) == "cannot save a dict"
    if writer_class in EXIT_CODES:
        assert f"failed to write {str(tmp_path / 'f.pt')!r}" in str(info.value)
    elif sys.version_info >= (3, 11):
        assert any("while writing" in note for note in info.value.__notes__)
    assert (tmp_path / "f.pt").read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["f.pt"]
    writer.finalize()  # reported once
    writer("g.pt", str(tmp_path), {"b": 2}, savefun=torch.save)  # still usable
    writer.finalize()
    assert torch.load(tmp_path / "g.pt") == {"b": 2}


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_failure_is_raised_by_the_next_call(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    # The next call waits for the failed write: a thread/process writer joins its previous
    # worker, a queue writer with one slot waits for it to free.
    kwargs: dict[str, Any] = {"max_pending": 1} if issubclass(writer_class, QueueWriter) else {}
    writer = writer_class(savefun=helpers.failing_save, **kwargs)
    writer("f", str(tmp_path), [1])
    with _raises_write_failure(writer_class, helpers.SaveFailedError, match="cannot save a list"):
        writer("f", str(tmp_path), [1])
    with contextlib.suppress(helpers.SaveFailedError):  # writes queued meanwhile fail too
        writer.finalize()


@pytest.mark.parametrize("writer_class", PROCESS_WRITERS, ids=process_ids)
def test_unpicklable_worker_error_keeps_its_type_message_and_traceback(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    writer = writer_class(savefun=helpers.unpicklable_error_save)  # type: ignore[call-arg]
    writer("f", str(tmp_path), 1)
    with _raises_write_failure(writer_class, helpers.TwoArgumentError) as info:
        writer.finalize()
    error = _error_of_the_write(writer_class, info.value)
    assert type(error) is helpers.TwoArgumentError
    assert str(error) == "code 7: disk on fire"
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "unpicklable_error_save" in str(error.__cause__)


@pytest.mark.parametrize("writer_class", PROCESS_WRITERS, ids=process_ids)
def test_killed_worker_process_is_reported_and_the_writer_recovers(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    writer = writer_class(savefun=helpers.suicidal_save)  # type: ignore[call-arg]
    writer("f", str(tmp_path), 1)
    with pytest.raises(RuntimeError, match=r"(killed by signal 9|exited with code -9)"):
        writer.finalize()
    assert not (tmp_path / "f").exists()
    writer("f", str(tmp_path), 2, savefun=torch.save)
    writer.finalize()
    assert torch.load(tmp_path / "f") == 2
    # The leftover of the killed worker was cleaned up by the next write.
    assert os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize("writer_class", PROCESS_WRITERS, ids=process_ids)
def test_process_writers_work_with_spawn(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    model, optimizer, state = _training_state()
    expected = copy.deepcopy(state)
    writer = writer_class(savefun=helpers.slow_save, mp_context="spawn")  # type: ignore[call-arg]
    writer("snapshot", str(tmp_path), state)
    _keep_training(model, optimizer, state)
    writer("bad", str(tmp_path), {}, savefun=helpers.failing_save)
    with _raises_write_failure(writer_class, helpers.SaveFailedError, match="cannot save a dict"):
        writer.finalize()
    _assert_same_state(torch.load(tmp_path / "snapshot"), expected)
    assert os.listdir(tmp_path) == ["snapshot"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: ProcessWriter(savefun=lambda t, f: None, mp_context="spawn"),
        lambda: ProcessQueueWriter(task=lambda *a, **k: None, mp_context="spawn"),
    ],
    ids=process_ids,
)
def test_unpicklable_callable_with_spawn_is_a_clear_error(
    tmp_path: Path, make: Callable[[], Writer]
) -> None:
    writer = make()
    with pytest.raises(TypeError, match="must be picklable to be sent to a writer process"):
        writer("f", str(tmp_path), 1)
    writer.finalize()


def test_unpicklable_savefun_of_process_queue_writer_fails_in_the_call(tmp_path: Path) -> None:
    with ProcessQueueWriter() as writer:
        with pytest.raises(TypeError, match="must be picklable"):
            writer("f", str(tmp_path), 1, savefun=lambda t, f: None)
        writer("g", str(tmp_path), 1)
    assert os.listdir(tmp_path) == ["g"]


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_post_save_hook_sees_each_completed_file(
    tmp_path: Path, writer_class: type[Writer]
) -> None:
    seen: list[tuple[str, Any]] = []
    writer = writer_class()  # type: ignore[call-arg]
    writer.add_post_save_hook(lambda path: seen.append((path, torch.load(path))))
    for i in range(3):
        writer(f"s{i}", str(tmp_path), i)
    writer.finalize()
    assert seen == [(str(tmp_path / f"s{i}"), i) for i in range(3)]


@pytest.mark.parametrize("writer_class", [ThreadQueueWriter, ProcessQueueWriter])
def test_queue_writer_runs_a_custom_task_in_order(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    with writer_class(task=helpers.recording_task) as writer:  # type: ignore[call-arg]
        for i in range(5):
            writer("log.txt", str(tmp_path), {"i": i}, append=True)
    assert (tmp_path / "log.txt").read_text() == "".join(f"{{'i': {i}}}\n" for i in range(5))


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_append_through_async_writers_is_ordered(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    with writer_class(savefun=helpers.write_bytes) as writer:  # type: ignore[call-arg]
        for i in range(6):
            writer("log.jsonl", str(tmp_path), f"{i}\n".encode(), append=True)
    assert (tmp_path / "log.jsonl").read_bytes() == b"".join(f"{i}\n".encode() for i in range(6))
    assert not any(is_temporary_file(name) for name in os.listdir(tmp_path))


def test_process_queue_writer_sends_thousands_of_tensors(tmp_path: Path) -> None:
    # All tensor data travels as one shared buffer, not one descriptor per tensor.
    target = {f"t{i}": torch.full((3,), float(i)) for i in range(3000)}
    with ProcessQueueWriter() as writer:
        for name in ("a", "b", "c"):
            writer(name, str(tmp_path), target)
    loaded = torch.load(tmp_path / "c")
    assert len(loaded) == 3000 and torch.equal(loaded["t2999"], torch.full((3,), 2999.0))


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_uncopyable_target_is_a_clear_error(tmp_path: Path, writer_class: type[Writer]) -> None:
    writer = writer_class()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"cannot be\s+copied.*pass a state dict"):
        writer("f", str(tmp_path), {"lock": threading.Lock()})
    writer.finalize()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer_class", PROCESS_WRITERS, ids=process_ids)
@pytest.mark.parametrize(
    ("context", "error", "match"),
    [("nope", ValueError, "mp_context must be one of"), (42, TypeError, "got 42")],
)
def test_bad_mp_context_is_rejected(
    writer_class: type[Writer], context: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        writer_class(mp_context=context)  # type: ignore[call-arg]


@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_bad_savefun_and_task_are_rejected(writer_class: type[Writer], tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=f"{writer_class.__name__}: savefun must be a callable"):
        writer_class(savefun=1)  # type: ignore[call-arg]
    writer = writer_class()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"savefun must be a callable.*got 'x'"):
        writer("f", str(tmp_path), 1, savefun="x")
    if writer_class in (ThreadQueueWriter, ProcessQueueWriter):
        with pytest.raises(TypeError, match="task must be callable like a writer, got 3"):
            writer_class(task=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("writer_name", ["ThreadQueueWriter", "ProcessQueueWriter"])
def test_pending_queue_writes_are_drained_at_interpreter_exit(
    tmp_path: Path, writer_name: str
) -> None:
    script = textwrap.dedent(
        f"""
        import torch
        from pytorch_pfn_extras.writing import {writer_name}
        writer = {writer_name}()
        for i in range(3):
            writer(f"{writer_name}_{{i}}", {str(tmp_path)!r}, torch.full((2,), i))
        # no finalize(): the writes must still land, and the interpreter must exit
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    for i in range(3):
        assert torch.equal(torch.load(tmp_path / f"{writer_name}_{i}"), torch.full((2,), i))


@pytest.mark.parametrize("process_writer", ["ProcessWriter", "ProcessQueueWriter"])
def test_process_writers_never_fork_while_a_thread_writer_is_inside_an_import(
    tmp_path: Path, process_writer: str
) -> None:
    # The thread writer's savefun imports a module that says when its body has begun, then
    # holds the import for a second unless a fork comes first. A child forked during the
    # import would inherit that module's import lock, held by a thread that does not exist in
    # the child, and hang on its own import of the module. The process writer is called once
    # the import has begun, so it must wait for the thread write to end before it forks.
    (tmp_path / "ppe_import_gate.py").write_text(
        "import threading\nbegun, forked, ended = (threading.Event() for _ in range(3))\n"
    )
    (tmp_path / "ppe_slow_import.py").write_text(
        "import ppe_import_gate as gate\ngate.begun.set()\ngate.forked.wait(1.0)\n"
        "gate.ended.set()\n"
    )
    out = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import multiprocessing, os, sys, torch
        sys.path.insert(0, {str(tmp_path)!r})
        import ppe_import_gate as gate
        from pytorch_pfn_extras.writing import ThreadQueueWriter, {process_writer}

        def save_after_import(target, fileobj):
            import ppe_slow_import
            torch.save(target, fileobj)

        forks_during_import = []

        def before_fork():
            forks_during_import.append(not gate.ended.is_set())
            gate.forked.set()  # a fork during the import: let the import end

        os.register_at_fork(before=before_fork)
        threads = ThreadQueueWriter(savefun=save_after_import)
        threads("by_thread", {str(out)!r}, torch.zeros(1))
        gate.begun.wait()  # the consumer thread is now inside the slow import
        processes = {process_writer}(savefun=save_after_import, mp_context="fork")
        processes("by_process", {str(out)!r}, torch.ones(1))
        if not forks_during_import or any(forks_during_import):
            # A child forked during the import hangs: end it, and this process, now.
            for child in multiprocessing.active_children():
                child.kill()
            print(f"forks (True: during the import): {{forks_during_import}}", file=sys.stderr)
            os._exit(1)
        processes.finalize()
        threads.finalize()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert torch.equal(torch.load(out / "by_thread"), torch.zeros(1))
    assert torch.equal(torch.load(out / "by_process"), torch.ones(1))


def test_forked_workers_do_not_deadlock_after_the_parent_used_threads(tmp_path: Path) -> None:
    # Forking after parallel tensor ops leaves the child a dead OpenMP pool;
    # a large copy in the worker used to hang there.
    script = textwrap.dedent(
        f"""
        import torch
        from pytorch_pfn_extras.writing import ProcessQueueWriter, ProcessWriter
        torch.set_num_threads(2)
        big = torch.randn(1 << 22)
        big.mul_(2.0)  # runs on the OpenMP pool
        for cls in (ProcessWriter, ProcessQueueWriter):
            with cls(mp_context="fork") as writer:
                writer(cls.__name__, {str(tmp_path)!r}, {{"big": big}})
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    for name in ("ProcessWriter", "ProcessQueueWriter"):
        assert torch.load(tmp_path / name)["big"].shape == (1 << 22,)


@pytest.mark.gpu
# Python 3.12 warns when a process with threads (CUDA's) forks; the worker touches no CUDA.
@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork\\(\\) may lead to deadlocks"
)
@pytest.mark.parametrize("writer_class", ASYNC_WRITERS, ids=ids)
def test_cuda_state_is_copied_to_cpu_at_call_time(
    tmp_path: Path, helpers: ModuleType, writer_class: type[Writer]
) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    weight = torch.arange(6.0, device="cuda")
    target = {"w": weight, "view": weight[2:]}
    writer = writer_class(savefun=helpers.slow_save)  # type: ignore[call-arg]
    writer("cuda.pt", str(tmp_path), target)
    weight.mul_(-1)
    writer.finalize()
    loaded = torch.load(tmp_path / "cuda.pt")
    assert loaded["w"].device.type == "cpu"
    assert torch.equal(loaded["w"], torch.arange(6.0))
    assert loaded["view"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
