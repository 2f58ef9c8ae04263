"""Errors inside an iteration: on_error once, no extension afterwards, finalizers, propagation."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import PRIORITY_WRITER, Extension, ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.writing import SimpleWriter, ThreadWriter


class Recorder(Extension):
    """Records every call the manager makes into a shared list."""

    def __init__(self, tag: str, events: list[Any], priority: int = 100) -> None:
        self.tag = tag
        self.events = events
        self.priority = priority

    def __call__(self, manager: Any) -> None:
        self.events.append((self.tag, "call", manager.iteration))

    def initialize(self, manager: Any) -> None:
        self.events.append((self.tag, "initialize", manager.iteration))

    def finalize(self, manager: Any) -> None:
        self.events.append((self.tag, "finalize", manager.iteration))

    def on_error(self, manager: Any, exc: BaseException, tb: types.TracebackType | None) -> None:
        assert tb is not None
        self.events.append((self.tag, "on_error", type(exc).__name__))


class FinalizeCountingWriter(SimpleWriter):
    finalized = 0

    def finalize(self) -> None:
        FinalizeCountingWriter.finalized += 1
        super().finalize()


def _manager(tmp_path: Any, events: list[Any], **kwargs: Any) -> ExtensionsManager:
    FinalizeCountingWriter.finalized = 0
    manager = ExtensionsManager(
        {}, {}, 5, iters_per_epoch=2, out_dir=tmp_path, writer=FinalizeCountingWriter(), **kwargs
    )
    manager.extend(Recorder("a", events, PRIORITY_WRITER))
    manager.extend(Recorder("b", events))
    return manager


def _calls_after(events: list[Any], index: int) -> list[Any]:
    return [e for e in events[index:] if e[1] == "call"]


@pytest.mark.parametrize("error_cls", [ValueError, KeyboardInterrupt])
def test_error_in_the_body_calls_on_error_once_then_finalizers_and_propagates(
    tmp_path: Any, error_cls: type[BaseException]
) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)
    with manager.run_iteration():
        pass
    error = error_cls("boom")
    with pytest.raises(error_cls) as excinfo, manager.run_iteration():
        raise error
    assert excinfo.value is error
    assert str(excinfo.value) == "boom"
    failure = events.index(("a", "on_error", error_cls.__name__))
    assert events[failure:] == [
        ("a", "on_error", error_cls.__name__),
        ("b", "on_error", error_cls.__name__),
        ("a", "finalize", 1),
        ("b", "finalize", 1),
    ]
    assert FinalizeCountingWriter.finalized == 1
    with pytest.raises(RuntimeError, match="training failed"):
        manager.run_iteration().__enter__()
    assert manager.stop_trigger
    manager.finalize()
    assert _calls_after(events, failure) == []
    assert [e[1] for e in events].count("on_error") == 2
    assert [e[1] for e in events].count("finalize") == 2


def test_error_in_an_extension_stops_the_rest_of_the_iteration(tmp_path: Any) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)
    error = RuntimeError("extension failed")

    def failing(m: Any) -> None:
        if m.iteration == 2:
            raise error

    manager.extend(failing, priority=150)
    with pytest.raises(RuntimeError) as excinfo:
        while not manager.stop_trigger:
            with manager.run_iteration():
                pass
    assert excinfo.value is error
    assert ("b", "call", 2) not in events  # "b" (priority 100) runs after the failing one
    assert ("a", "call", 2) in events
    assert [e for e in events if e[1] == "on_error"] == [
        ("a", "on_error", "RuntimeError"),
        ("b", "on_error", "RuntimeError"),
    ]
    assert FinalizeCountingWriter.finalized == 1


def test_failing_on_error_handler_warns_and_the_original_error_propagates(tmp_path: Any) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)

    class BadHandler(Extension):
        def __call__(self, manager: Any) -> None:
            pass

        def on_error(self, manager: Any, exc: BaseException, tb: Any) -> None:
            raise OSError("handler broke")

    manager.extend(BadHandler(), priority=1000)
    error = ValueError("original")
    with (
        pytest.warns(RuntimeWarning, match="on_error handler of extension 'BadHandler' raised"),
        pytest.raises(ValueError) as excinfo,
        manager.run_iteration(),
    ):
        raise error
    assert excinfo.value is error
    assert ("b", "on_error", "ValueError") in events
    assert ("b", "finalize", 0) in events


def test_error_flushes_asynchronous_writer_and_snapshot_on_error_is_loadable(tmp_path: Any) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = ThreadWriter()
    manager = ExtensionsManager(
        model, optimizer, 5, iters_per_epoch=4, out_dir=tmp_path, writer=writer
    )
    manager.extend(ext_module.LogReport(trigger=(1, "iteration")))
    manager.extend(ext_module.snapshot(snapshot_on_error=True, filename="crash_{.iteration}"))
    for _ in range(3):
        with manager.run_iteration():
            reporting.report({"loss": 1.0})
    with pytest.raises(ZeroDivisionError), manager.run_iteration():
        model.weight.data.fill_(7.0)
        _ = 1 / 0
    state = torch.load(tmp_path / "crash_3", weights_only=True)
    assert state["_start_iteration"] == 3
    torch.testing.assert_close(state["models"]["main"]["weight"], torch.full((2, 2), 7.0))
    assert (tmp_path / "log").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_error_in_call_before_training_extension_is_handled_like_an_iteration(
    tmp_path: Any,
) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)

    def before(m: Any) -> None:
        raise LookupError("before training")

    manager.extend(before, call_before_training=True)
    with pytest.raises(LookupError, match="before training"):
        manager.run_iteration().__enter__()
    assert ("a", "on_error", "LookupError") in events
    assert FinalizeCountingWriter.finalized == 1


def test_finalizer_error_propagates_after_every_finalizer_ran(tmp_path: Any) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)

    class BadFinalizer(Extension):
        def __call__(self, manager: Any) -> None:
            pass

        def finalize(self, manager: Any) -> None:
            raise OSError("cannot close")

    manager.extend(BadFinalizer(), priority=1000)
    with manager.run_iteration():
        pass
    with pytest.raises(OSError, match="cannot close"):
        manager.finalize()
    assert ("a", "finalize", 1) in events and ("b", "finalize", 1) in events
    assert FinalizeCountingWriter.finalized == 1


def test_error_while_starting_finalizes_without_on_error(tmp_path: Any) -> None:
    events: list[Any] = []
    manager = _manager(tmp_path, events)

    class BadStart(Extension):
        def __call__(self, manager: Any) -> None:
            pass

        def initialize(self, manager: Any) -> None:
            raise FileNotFoundError("no dataset")

    manager.extend(BadStart(), priority=150)
    with pytest.raises(FileNotFoundError, match="no dataset"):
        manager.run_iteration().__enter__()
    assert [e[1] for e in events] == ["initialize", "finalize", "finalize"]
    assert FinalizeCountingWriter.finalized == 1
    with pytest.raises(RuntimeError, match="training failed"):
        manager.run_iteration().__enter__()
