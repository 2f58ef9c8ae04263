"""PPE 0.9 user code: ``savefun=None``, the subclassing hooks, and the public signatures."""

from __future__ import annotations

import importlib
import inspect
import multiprocessing
import multiprocessing.queues
import os
import queue
import re
import threading
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest
import torch

from pytorch_pfn_extras import writing
from pytorch_pfn_extras.writing import (
    ProcessQueueWriter,
    ProcessWriter,
    QueueWriter,
    SimpleWriter,
    StandardWriter,
    TensorBoardWriter,
    ThreadQueueWriter,
    ThreadWriter,
    Writer,
)

HERE = Path(__file__).resolve().parent
SAVING_WRITERS = [SimpleWriter, ThreadWriter, ProcessWriter, ThreadQueueWriter, ProcessQueueWriter]
saving_ids = [cls.__name__ for cls in SAVING_WRITERS]


@pytest.fixture
def helpers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("writing_helpers")


def _state(value: float) -> dict[str, Any]:
    return {"w": torch.full((2, 3), value), "step": int(value)}


# -- savefun=None means torch.save ----------------------------------------------------


@pytest.mark.parametrize("writer_class", SAVING_WRITERS, ids=saving_ids)
@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_savefun_none_saves_with_torch_save(
    tmp_path: Path, writer_class: type[Writer], how: str
) -> None:
    writer = writer_class(savefun=None) if how == "keyword" else writer_class(None)  # type: ignore[call-arg]
    with writer:
        writer("a.pt", str(tmp_path), _state(1.0))
        writer("b.pt", str(tmp_path), _state(2.0), savefun=None)
    for name, value in (("a.pt", 1.0), ("b.pt", 2.0)):
        loaded = torch.load(tmp_path / name)
        assert torch.equal(loaded["w"], torch.full((2, 3), value)) and loaded["step"] == int(value)


def test_writer_save_with_savefun_none_uses_torch_save(tmp_path: Path) -> None:
    class PlainWriter(Writer):
        def __call__(
            self,
            filename: str,
            out_dir: str,
            target: Any,
            *,
            savefun: Any = None,
            append: bool = False,
        ) -> None:
            self.save(filename, out_dir, target, savefun, append)

    PlainWriter()("m.pt", str(tmp_path), _state(3.0))
    assert torch.load(tmp_path / "m.pt")["step"] == 3


def test_create_worker_with_savefun_none_uses_the_writers_savefun(tmp_path: Path) -> None:
    seen: list[Any] = []

    def recording_save(target: Any, fileobj: IO[bytes], **kwargs: Any) -> None:
        seen.append((target, kwargs))
        torch.save(target, fileobj)

    writer = ThreadWriter(savefun=recording_save)
    worker = writer.create_worker("w.pt", str(tmp_path), {"x": 1}, protocol_hint=2)
    worker.start()
    worker.join()
    assert seen == [({"x": 1}, {"protocol_hint": 2})]
    assert torch.load(tmp_path / "w.pt") == {"x": 1}
    default = ThreadWriter(None).create_worker("d.pt", str(tmp_path), {"y": 2})
    default.start()
    default.join()
    assert torch.load(tmp_path / "d.pt") == {"y": 2}


def test_tensorboard_writer_accepts_savefun_none(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(None, out_dir=str(tmp_path))
    writer("log", str(tmp_path), {"iteration": 1, "main/loss": 0.5})
    writer("log", str(tmp_path), {"iteration": 2, "main/loss": 0.25}, savefun=None)
    writer.finalize()
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert sorted(accumulator.Tags()["scalars"]) == ["iteration", "main/loss"]
    assert [(e.step, e.value) for e in accumulator.Scalars("main/loss")] == [(1, 0.5), (2, 0.25)]


# -- StandardWriter and its create_worker hook -------------------------------------------


class _RecordingThread(threading.Thread):
    def __init__(self, events: list[str], name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events = events
        self.label = name

    def start(self) -> None:
        self.events.append(f"start {self.label}")
        super().start()

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        self.events.append(f"join {self.label}")


class LoggedThreadWriter(StandardWriter):
    """A PPE-style StandardWriter subclass: its own worker per write."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[str] = []
        self.calls: list[tuple[str, Any, bool, dict[str, Any]]] = []

    def create_worker(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Any = None,
        append: bool = False,
        **savefun_kwargs: Any,
    ) -> threading.Thread:
        self.events.append(f"create {filename}")
        self.calls.append((filename, savefun, append, savefun_kwargs))
        return _RecordingThread(
            self.events,
            filename,
            target=self.save,
            args=(filename, out_dir, target, savefun, append),
            kwargs=savefun_kwargs,
        )


def test_standard_writer_subclass_runs_its_workers_one_at_a_time(tmp_path: Path) -> None:
    writer = LoggedThreadWriter(pickle_protocol=2)
    assert isinstance(writer, StandardWriter)
    with writer:
        writer("a.pt", str(tmp_path), _state(1.0))
        writer("b.pt", str(tmp_path), _state(2.0))
    assert writer.events == [
        "create a.pt",
        "start a.pt",
        "join a.pt",
        "create b.pt",
        "start b.pt",
        "join b.pt",
    ]
    assert writer.calls == [
        ("a.pt", torch.save, False, {"pickle_protocol": 2}),
        ("b.pt", torch.save, False, {"pickle_protocol": 2}),
    ]
    assert torch.load(tmp_path / "b.pt")["step"] == 2


def _exit_with(code: int) -> None:
    os._exit(code)


class ExitingProcessWriter(StandardWriter):
    def create_worker(
        self,
        filename: str,
        out_dir: str,
        target: Any,
        *,
        savefun: Any = None,
        append: bool = False,
        **savefun_kwargs: Any,
    ) -> Any:
        return multiprocessing.get_context("fork").Process(target=_exit_with, args=(3,))


def test_standard_writer_reports_a_user_process_that_fails(tmp_path: Path) -> None:
    writer = ExitingProcessWriter()
    writer("x", str(tmp_path), 1)
    with pytest.raises(RuntimeError, match=r"worker process writing '.*x' exited with code 3"):
        writer.finalize()


@pytest.mark.parametrize("base", [ThreadWriter, ProcessWriter])
def test_overriding_create_worker_of_a_builtin_writer(tmp_path: Path, base: type) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class Counting(base):  # type: ignore[misc, valid-type]
        def create_worker(self, filename: str, *args: Any, **kwargs: Any) -> Any:
            calls.append((filename, kwargs))
            return super().create_worker(filename, *args, **kwargs)

    with Counting(pickle_protocol=2) as writer:
        writer("a", str(tmp_path), _state(1.0), append=False)
    assert calls == [("a", {"savefun": torch.save, "append": False, "pickle_protocol": 2})]
    assert torch.load(tmp_path / "a")["step"] == 1


@pytest.mark.parametrize("base", [StandardWriter, QueueWriter])
def test_bases_are_constructed_and_say_what_to_implement_when_used(
    tmp_path: Path, base: type
) -> None:
    # As in PPE 0.9: the bases can be constructed; their hooks raise when a write needs them.
    writer = base()
    hook = "create_worker" if base is StandardWriter else "create_queue"
    with pytest.raises(NotImplementedError, match=rf"^{base.__name__} does not implement {hook}\("):
        writer("a", str(tmp_path), _state(1.0))
    writer.finalize()
    assert list(tmp_path.iterdir()) == []


# -- QueueWriter hooks ------------------------------------------------------------------------


class CountingQueue(queue.Queue):  # type: ignore[type-arg]
    def __init__(self) -> None:
        super().__init__()
        self.puts = 0

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.puts += 1
        super().put(item, block, timeout)


class HookedThreadQueueWriter(ThreadQueueWriter):
    """Overrides every hook of PPE's QueueWriter, as a user would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.tasks: list[tuple[str, Any]] = []
        self.queues: list[CountingQueue] = []
        self.consumers: list[threading.Thread] = []
        self.consumed_in: list[str] = []
        super().__init__(*args, **kwargs)

    def create_task(self, savefun: Any) -> Any:
        base = super().create_task(savefun)

        def task(filename: str, out_dir: str, target: Any, **kwargs: Any) -> None:
            self.tasks.append((filename, target["step"]))
            base(filename, out_dir, target, **kwargs)

        return task

    def create_queue(self) -> CountingQueue:
        q = CountingQueue()
        self.queues.append(q)
        return q

    def create_consumer(self, q: Any) -> threading.Thread:
        consumer = threading.Thread(target=self.consume, args=(q,), name="my-consumer")
        self.consumers.append(consumer)
        return consumer

    def consume(self, q: Any) -> None:
        self.consumed_in.append(threading.current_thread().name)
        super().consume(q)


def test_thread_queue_writer_hooks_are_called_and_their_results_used(tmp_path: Path) -> None:
    writer = HookedThreadQueueWriter()
    for step in range(3):
        writer(f"s{step}", str(tmp_path), _state(float(step)))
    writer.finalize()
    assert writer.tasks == [("s0", 0), ("s1", 1), ("s2", 2)]
    assert [q.puts for q in writer.queues] == [4]  # three writes and the stop marker
    assert writer.consumed_in == ["my-consumer"] and not writer.consumers[0].is_alive()
    assert [torch.load(tmp_path / f"s{step}")["step"] for step in range(3)] == [0, 1, 2]
    writer("again", str(tmp_path), _state(5.0))  # a new queue and consumer after finalize
    writer.finalize()
    assert len(writer.queues) == len(writer.consumers) == 2
    assert torch.load(tmp_path / "again")["step"] == 5


def ppe_style_consume(q: Any) -> None:
    """PPE 0.9's consumer loop, written against its item layout."""
    while True:
        task = q.get()
        if task is None:
            q.task_done()
            return
        task[0](task[1], task[2], task[3], savefun=task[4], append=task[5])
        q.task_done()


class PPEStyleThreadQueueWriter(ThreadQueueWriter):
    def consume(self, q: Any) -> None:
        ppe_style_consume(q)


class PPEStyleProcessQueueWriter(ProcessQueueWriter):
    def consume(self, q: Any) -> None:
        # Runs in the consumer process: leave a trace the test can see.
        Path(self.out_dir, f"consumer-{os.getpid()}").write_text("")
        ppe_style_consume(q)


@pytest.mark.parametrize(
    "writer_class",
    [PPEStyleThreadQueueWriter, PPEStyleProcessQueueWriter],
    ids=["thread", "process"],
)
def test_a_ppe_style_consume_override_writes_everything(
    tmp_path: Path, helpers: ModuleType, writer_class: type[QueueWriter]
) -> None:
    out = tmp_path / "out"
    hooks: list[str] = []
    process = writer_class is PPEStyleProcessQueueWriter
    writer = writer_class(out_dir=str(tmp_path), **({"mp_context": "fork"} if process else {}))
    writer.add_post_save_hook(hooks.append)
    for step in range(4):
        writer(f"s{step}", str(out), _state(float(step)))
    writer("bad", str(out), _state(9.0), savefun=helpers.failing_save)
    with pytest.raises(helpers.SaveFailedError, match="cannot save a dict"):
        writer.finalize()
    assert [torch.load(out / f"s{step}")["step"] for step in range(4)] == [0, 1, 2, 3]
    assert hooks == [str(out / f"s{step}") for step in range(4)]
    if process:
        (marker,) = [p.name for p in tmp_path.iterdir() if p.name.startswith("consumer-")]
        assert marker != f"consumer-{os.getpid()}"


def _thread_consumer(writer: QueueWriter, q: Any) -> threading.Thread:
    return threading.Thread(target=writer.consume, args=(q,), daemon=True)


class MyQueueWriter(QueueWriter):
    """A queue writer built on the base class, as PPE's ThreadQueueWriter is."""

    def create_queue(self) -> Any:
        return queue.Queue()

    def create_consumer(self, q: Any) -> Any:
        return _thread_consumer(self, q)


def test_queue_writer_base_runs_a_user_queue_and_consumer(tmp_path: Path) -> None:
    with MyQueueWriter(savefun=None, max_pending=1) as writer:
        for step in range(3):
            writer("latest", str(tmp_path), _state(float(step)))
    assert torch.load(tmp_path / "latest")["step"] == 2


def test_process_queue_writer_hooks_are_called(tmp_path: Path) -> None:
    made: list[Any] = []

    class Hooked(ProcessQueueWriter):
        def create_queue(self) -> Any:
            q = super().create_queue()
            made.append(q)
            return q

        def create_consumer(self, q: Any) -> Any:
            consumer = super().create_consumer(q)
            made.append(consumer)
            return consumer

    with Hooked(mp_context="fork") as writer:
        writer("a", str(tmp_path), _state(1.0))
    queue_, consumer = made
    assert isinstance(queue_, multiprocessing.queues.JoinableQueue)
    assert consumer.exitcode == 0 and consumer.pid != os.getpid()
    assert torch.load(tmp_path / "a")["step"] == 1


# -- public signatures ------------------------------------------------------------------------

# The parameters of PPE 0.9's writing API (names, order, kinds, defaults).
PPE09_SIGNATURES = """
class ProcessQueueWriter(self, savefun=<function save>, fs=None, out_dir='', task=None)
  ProcessQueueWriter.create_consumer(self, q)
  ProcessQueueWriter.create_queue(self)
class ProcessWriter(self, savefun=<function save>, fs=None, out_dir='', **kwds)
  ProcessWriter.create_worker(self, filename, out_dir, target, *, savefun=None, append=False, **savefun_kwargs)
class QueueWriter(self, savefun=<function save>, fs=None, out_dir='', task=None)
  QueueWriter.__call__(self, filename, out_dir, target, *, savefun=None, append=False)
  QueueWriter.consume(self, q)
  QueueWriter.create_consumer(self, q)
  QueueWriter.create_queue(self)
  QueueWriter.create_task(self, savefun)
  QueueWriter.finalize(self)
class SimpleWriter(self, savefun=<function save>, fs=None, out_dir='', **kwds)
  SimpleWriter.__call__(self, filename, out_dir, target, *, savefun=None, append=False)
class StandardWriter(self, savefun=<function save>, fs=None, out_dir='', **kwds)
  StandardWriter.__call__(self, filename, out_dir, target, *, savefun=None, append=False)
  StandardWriter.create_worker(self, filename, out_dir, target, *, savefun=None, append=False, **savefun_kwargs)
  StandardWriter.finalize(self)
class TensorBoardWriter(self, savefun=None, fs=None, out_dir='', stats=None, **kwds)
  TensorBoardWriter.__call__(self, filename, out_dir, target, *, savefun=None, append=False)
  TensorBoardWriter.finalize(self)
class ThreadQueueWriter(self, savefun=<function save>, fs=None, out_dir='', task=None)
  ThreadQueueWriter.create_consumer(self, q)
  ThreadQueueWriter.create_queue(self)
class ThreadWriter(self, savefun=<function save>, fs=None, out_dir='', **kwds)
  ThreadWriter.create_worker(self, filename, out_dir, target, *, savefun=None, append=False, **savefun_kwargs)
class Writer(self, fs=None, out_dir='')
  Writer.__call__(self, filename, out_dir, target, *, savefun=None, append=False)
  Writer.finalize(self)
  Writer.initialize(self, out_dir)
  Writer.save(self, filename, out_dir, target, savefun, append, **savefun_kwargs)
"""
_DEFAULTS = {"<function save>": torch.save, "None": None, "''": "", "False": False}


def _ppe_parameters(text: str) -> list[tuple[str, inspect._ParameterKind, Any]]:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters: list[tuple[str, inspect._ParameterKind, Any]] = []
    for part in text.split(", ")[1:]:  # without self
        if part == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.startswith("**"):
            parameters.append((part[2:], inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty))
        else:
            name, _, default = part.partition("=")
            value = _DEFAULTS[default] if default else inspect.Parameter.empty
            parameters.append((name, kind, value))
    return parameters


@pytest.mark.parametrize("line", [line.strip() for line in PPE09_SIGNATURES.strip().splitlines()])
def test_public_signatures_extend_ppe_09(line: str) -> None:
    match = re.fullmatch(r"(?:class )?([\w.]+)\((.*)\)", line)
    assert match is not None
    path, params = match.groups()
    owner, _, method = path.partition(".")
    obj = getattr(writing, owner)
    signature = inspect.signature(getattr(obj, method) if method else obj.__init__)
    ours = [(p.name, p.kind, p.default) for p in list(signature.parameters.values())[1:]]
    expected = _ppe_parameters(params)
    # PPE's parameters come first, as they are; ours may add keyword-only ones before **kwds.
    positional = [p for p in expected if p[1] == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert ours[: len(positional)] == positional
    rest = ours[len(positional) :]
    for parameter in expected[len(positional) :]:
        assert parameter in rest, f"{path}: missing {parameter} in {signature}"
    for name, kind, _ in rest:
        assert kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD), name
