from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from pytorch_pfn_extras.profiler import (
    ChromeTracer,
    TraceableDataset,
    Tracer,
    clear_tracer,
    get_tracer,
    load_chrome_trace_as_json,
    record,
)
from pytorch_pfn_extras.writing import SimpleWriter


@pytest.fixture(autouse=True)
def fresh_tracer() -> Iterator[None]:
    clear_tracer()
    yield
    clear_tracer()


def _event(tracer: Tracer, name: str) -> None:
    with tracer.add_event(name):
        pass


def test_events_are_chrome_complete_events_in_microseconds() -> None:
    tracer = ChromeTracer()
    before = time.time() * 1e6
    with tracer.add_event("load") as event:
        event["args"] = {"path": "a.png"}
    after = time.time() * 1e6
    (recorded,) = tracer.get_events()
    assert recorded is event
    assert set(recorded) == {"name", "ph", "ts", "dur", "pid", "tid", "args"}
    assert recorded["name"] == "load"
    assert recorded["ph"] == "X"
    assert before <= recorded["ts"] <= after
    assert recorded["dur"] >= 0
    assert recorded["pid"] == os.getpid()
    assert recorded["tid"] == threading.get_native_id()
    assert recorded["args"] == {"path": "a.png"}


def test_a_section_that_raises_is_still_an_event() -> None:
    tracer = ChromeTracer()
    with pytest.raises(KeyError), tracer.add_event("lookup"):
        raise KeyError("missing")
    assert [e["name"] for e in tracer.get_events()] == ["lookup"]


def test_add_remote_event_adds_an_event_measured_elsewhere() -> None:
    tracer = ChromeTracer()
    remote = {"name": "ignored", "ph": "X", "ts": 5.0, "dur": 2.0, "pid": 77, "tid": 7}
    tracer.add_remote_event("remote_load", remote)
    tracer.add_remote_event(name="kw", event={"ph": "i", "ts": 9.0, "pid": 1, "tid": 1})
    tracer.enable(False)
    tracer.add_remote_event("while_disabled", remote)
    assert tracer.get_events() == [
        {**remote, "name": "remote_load"},
        {"ph": "i", "ts": 9.0, "pid": 1, "tid": 1, "name": "kw"},
    ]
    assert remote["name"] == "ignored"  # the caller's dict is not modified
    with pytest.raises(TypeError, match="must be a mapping, got list"):
        tracer.add_remote_event("bad", [1, 2])


def test_events_of_threads_carry_their_thread_id() -> None:
    tracer = ChromeTracer()
    threads = [threading.Thread(target=_event, args=(tracer, f"t{i}")) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = tracer.get_events()
    assert sorted(e["name"] for e in events) == ["t0", "t1", "t2"]
    assert threading.get_native_id() not in {e["tid"] for e in events}
    assert "args" not in events[0]


def test_disabled_tracer_records_nothing_until_enabled() -> None:
    tracer = ChromeTracer(enable=False)
    assert not tracer.enabled
    with tracer.add_event("off") as event:
        assert event is None
    tracer.enable(enable_flag=True)
    _event(tracer, "on")
    tracer.enable(False)
    _event(tracer, "off_again")
    assert [e["name"] for e in tracer.get_events()] == ["on"]


def test_max_event_count_drops_later_events_with_one_warning() -> None:
    tracer = ChromeTracer(max_event_count=2)
    _event(tracer, "a")
    _event(tracer, "b")
    with pytest.warns(RuntimeWarning, match="max_event_count=2"):
        _event(tracer, "c")
        _event(tracer, "d")
    assert [e["name"] for e in tracer.get_events()] == ["a", "b"]


@pytest.mark.parametrize("count", [-1, 1.5, "10"])
def test_max_event_count_must_be_a_non_negative_int(count: object) -> None:
    with pytest.raises(ValueError, match="max_event_count must be None or a non-negative int"):
        ChromeTracer(max_event_count=count)  # type: ignore[arg-type]


def test_clear_discards_events() -> None:
    tracer = ChromeTracer()
    _event(tracer, "a")
    tracer.clear()
    assert tracer.get_events() == []


def test_append_mode_flush_appends_new_events_to_an_unterminated_array(tmp_path: Path) -> None:
    tracer = ChromeTracer()
    writer = SimpleWriter(out_dir=str(tmp_path))
    _event(tracer, "first")
    tracer.flush("trace.json", writer)
    text = (tmp_path / "trace.json").read_text()
    assert text.startswith("[\n") and text.rstrip().endswith(",")
    _event(tracer, "second")
    _event(tracer, "third")
    tracer.flush("trace.json", writer)
    tracer.flush("trace.json", writer)  # nothing new
    events = load_chrome_trace_as_json(tmp_path / "trace.json")
    assert [e["name"] for e in events] == ["first", "second", "third"]
    assert tracer.get_events() == []  # flushed events left memory


def test_flushing_while_threads_record_loses_no_event(tmp_path: Path) -> None:
    tracer = ChromeTracer()
    writer = SimpleWriter(out_dir=str(tmp_path))

    def produce(name: str) -> None:
        for _ in range(300):
            _event(tracer, name)

    threads = [threading.Thread(target=produce, args=(f"t{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        tracer.flush("trace.json", writer)
    for thread in threads:
        thread.join()
    tracer.flush("trace.json", writer)
    names = [e["name"] for e in load_chrome_trace_as_json(tmp_path / "trace.json")]
    assert sorted(names) == sorted([f"t{i}" for i in range(3)] * 300)


def test_overwrite_mode_flush_writes_a_complete_json_array(tmp_path: Path) -> None:
    tracer = ChromeTracer(append=False)
    writer = SimpleWriter(out_dir=str(tmp_path))
    _event(tracer, "a")
    tracer.flush("trace.json", writer)
    _event(tracer, "b")
    tracer.flush("trace.json", writer)
    events = json.loads((tmp_path / "trace.json").read_text())
    assert [e["name"] for e in events] == ["a", "b"]
    assert len(tracer.get_events()) == 2


def test_serialize_gives_the_bytes_flush_would_write() -> None:
    tracer = ChromeTracer()
    _event(tracer, "a")
    first = tracer.serialize()
    _event(tracer, "b")
    second = tracer.serialize()
    events = json.loads((first + second).decode().rstrip().rstrip(",") + "]")
    assert [e["name"] for e in events] == ["a", "b"]
    assert not second.startswith(b"[")


def test_load_chrome_trace_accepts_every_chrome_layout(tmp_path: Path) -> None:
    event = {"name": "x", "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1}
    layouts = {
        "complete.json": json.dumps([event]),
        "unterminated.json": "[\n" + json.dumps(event) + ",\n",
        "no_comma.json": "[" + json.dumps(event),
        "object.json": json.dumps({"traceEvents": [event], "displayTimeUnit": "ms"}),
    }
    for name, text in layouts.items():
        (tmp_path / name).write_text(text)
        assert load_chrome_trace_as_json(tmp_path / name) == [event], name
    (tmp_path / "empty.json").write_text("[\n")
    assert load_chrome_trace_as_json(tmp_path / "empty.json") == []


@pytest.mark.parametrize("text", ["not json", '{"a": 1}', "[1, 2"])
def test_load_chrome_trace_rejects_other_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="is not a Chrome trace file"):
        load_chrome_trace_as_json(path)


def test_state_dict_round_trips_and_resumes_appending(tmp_path: Path) -> None:
    tracer = ChromeTracer()
    writer = SimpleWriter(out_dir=str(tmp_path))
    _event(tracer, "flushed")
    tracer.flush("trace.json", writer)
    _event(tracer, "pending")
    state = tracer.state_dict()
    assert json.loads(json.dumps(state)) == state  # plain data

    resumed = ChromeTracer()
    resumed.load_state_dict(state)
    assert [e["name"] for e in resumed.get_events()] == ["pending"]
    _event(resumed, "after_resume")
    resumed.flush("trace.json", writer)
    names = [e["name"] for e in load_chrome_trace_as_json(tmp_path / "trace.json")]
    assert names == ["flushed", "pending", "after_resume"]
    with pytest.raises(KeyError, match="lacks 'events'"):
        ChromeTracer().load_state_dict(to_load={"enabled": True})


def test_initialize_writer_and_finalize_make_a_complete_json_file(tmp_path: Path) -> None:
    tracer = ChromeTracer()
    writer = SimpleWriter(out_dir=str(tmp_path))
    (tmp_path / "trace.json").write_text("old content")
    tracer.initialize_writer("trace.json", writer)
    assert load_chrome_trace_as_json(tmp_path / "trace.json") == []  # started anew
    _event(tracer, "epoch-1")
    tracer.flush("trace.json", writer)
    _event(tracer, "epoch-2")  # not flushed: finalize writes it
    tracer.finalize()
    events = json.loads((tmp_path / "trace.json").read_text())  # plain, complete JSON
    assert [e["name"] for e in events if e["ph"] == "X"] == ["epoch-1", "epoch-2"]
    assert events[-1]["ph"] == "M"  # the metadata event that closes the array
    _event(tracer, "next-run")
    tracer.flush("trace.json", writer)  # a flush after finalize starts the file again
    assert [e["name"] for e in load_chrome_trace_as_json(tmp_path / "trace.json")] == ["next-run"]


def test_finalize_without_a_file_does_nothing_and_overwrite_mode_keeps_complete_json(
    tmp_path: Path,
) -> None:
    ChromeTracer().finalize()
    tracer = ChromeTracer(append=False)
    writer = SimpleWriter(out_dir=str(tmp_path))
    tracer.initialize_writer(filename="trace.json", writer=writer)
    _event(tracer, "a")
    tracer.finalize()
    assert [e["name"] for e in json.loads((tmp_path / "trace.json").read_text())] == ["a"]


def test_get_tracer_returns_one_global_tracer() -> None:
    tracer = get_tracer()
    assert isinstance(tracer, ChromeTracer)
    assert get_tracer() is tracer
    assert get_tracer(ChromeTracer) is tracer
    clear_tracer()
    assert get_tracer() is not tracer


def test_get_tracer_passes_params_to_the_class() -> None:
    tracer = get_tracer(ChromeTracer, 1, True, False)
    assert isinstance(tracer, ChromeTracer)
    _event(tracer, "a")
    with pytest.warns(RuntimeWarning, match="max_event_count=1"):
        _event(tracer, "b")
    with pytest.raises(ValueError, match=r"exists already.*clear_tracer"):
        get_tracer(ChromeTracer, 5)


class _ListTracer(Tracer):
    """A custom tracer written against the PPE 0.9 interface: names of finished events."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.remote: list[tuple[str, Any]] = []
        self.enabled = True

    @contextlib.contextmanager
    def add_event(self, name: str) -> Iterator[None]:
        yield None
        if self.enabled:
            self.names.append(name)

    def add_remote_event(self, name: str, value: Any) -> None:
        self.remote.append((name, value))

    def enable(self, enable_flag: bool) -> None:
        self.enabled = enable_flag

    def clear(self) -> None:
        self.names.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"names": list(self.names)}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        self.names = list(to_load["names"])


def test_a_custom_tracer_receives_the_record_sections() -> None:
    tracer = get_tracer(_ListTracer)
    assert isinstance(tracer, _ListTracer)
    with record("section", enable=False, trace=True):
        pass
    with record("untraced"):
        pass
    tracer.enable(False)
    with record("while_disabled", trace=True):
        pass
    assert tracer.names == ["section"]
    with pytest.raises(ValueError, match="is a _ListTracer, not a ChromeTracer"):
        get_tracer(ChromeTracer)


def test_a_custom_tracer_receives_the_traceable_dataset_items() -> None:
    tracer = _ListTracer()
    dataset = TraceableDataset(TensorDataset(torch.arange(3)), "item", tracer)
    assert [int(dataset[i][0]) for i in range(3)] == [0, 1, 2]
    assert tracer.names == ["item"] * 3


def test_the_base_tracer_names_what_a_subclass_does_not_implement(tmp_path: Path) -> None:
    tracer = _ListTracer()
    with pytest.raises(NotImplementedError, match=r"_ListTracer does not implement flush\(\)"):
        tracer.flush("trace.json", SimpleWriter(out_dir=str(tmp_path)))
    tracer.initialize_writer("trace.json", SimpleWriter(out_dir=str(tmp_path)))  # no-ops
    tracer.finalize()
    with pytest.raises(NotImplementedError, match=r"Tracer does not implement add_event\(\)"):
        Tracer().add_event("x")


def test_a_pickled_tracer_carries_its_settings_not_its_events() -> None:
    tracer = ChromeTracer(max_event_count=7, append=False)
    _event(tracer, "a")
    copy = pickle.loads(pickle.dumps(tracer))
    assert copy.get_events() == []
    assert copy.enabled


def test_traceable_dataset_traces_getitem_in_the_main_process() -> None:
    tracer = ChromeTracer()
    dataset = TraceableDataset(TensorDataset(torch.arange(4)), "item", tracer)
    assert len(dataset) == 4
    assert [dataset[i][0].item() for i in range(4)] == [0, 1, 2, 3]
    events = tracer.get_events()
    assert [(e["name"], e["args"]["index"]) for e in events] == [("item", i) for i in range(4)]


def test_traceable_dataset_defaults_to_the_global_tracer() -> None:
    dataset = TraceableDataset(TensorDataset(torch.arange(2)), "item")
    dataset[1]
    assert [e["args"] for e in get_tracer().get_events()] == [{"index": 1}]  # type: ignore[attr-defined]


def _load_all(loader: DataLoader[Any]) -> list[int]:
    return sorted(int(v) for (batch,) in loader for v in batch)


@pytest.mark.parametrize(
    "context",
    ["fork", pytest.param("spawn", marks=pytest.mark.slow)],  # spawn imports torch twice
)
def test_worker_process_events_come_back_to_the_main_process(context: str, tmp_path: Path) -> None:
    tracer = ChromeTracer()
    dataset = TraceableDataset(TensorDataset(torch.arange(12)), "getitem", tracer)
    loader = DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context=context)
    assert _load_all(loader) == list(range(12))
    events = tracer.get_events()
    assert sorted(e["args"]["index"] for e in events) == list(range(12))
    worker_pids = {e["pid"] for e in events}
    assert len(worker_pids) == 2
    assert os.getpid() not in worker_pids
    tracer.flush("trace.json", SimpleWriter(out_dir=str(tmp_path)))
    assert len(load_chrome_trace_as_json(tmp_path / "trace.json")) == 12
    assert tracer.get_events() == []  # each worker event is collected once


class _RecordingDataset(Dataset[int]):
    """Uses record(trace=True) inside __getitem__: the global tracer, inherited by fork."""

    def __getitem__(self, index: int) -> int:
        with record("user_section", enable=False, trace=True):
            return index

    def __len__(self) -> int:
        return 6


def test_record_in_forked_workers_reaches_the_global_tracer() -> None:
    tracer = get_tracer()
    loader = DataLoader(
        _RecordingDataset(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(int(v) for batch in loader for v in batch) == list(range(6))
    events = tracer.get_events()  # type: ignore[attr-defined]
    assert [e["name"] for e in events] == ["user_section"] * 6
    assert os.getpid() not in {e["pid"] for e in events}


def test_worker_events_spool_is_removed_with_the_tracer() -> None:
    tracer = ChromeTracer()
    dataset = TraceableDataset(TensorDataset(torch.arange(4)), "getitem", tracer)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context="fork")
    assert _load_all(loader) == [0, 1, 2, 3]
    spool = tracer._spool.path
    assert os.path.isdir(spool)
    del tracer, dataset, loader
    gc.collect()
    assert not os.path.exists(spool)
