"""Times reported in child processes reach the parent's TimeSummary.

The functions run by spawned children are imported by module name: this module, put on
``sys.path`` by the ``children`` fixture (spawned processes inherit the parent's ``sys.path``).
"""

from __future__ import annotations

import importlib
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from torch.utils.data import DataLoader, Dataset

from pytorch_pfn_extras.profiler import TimeSummary, get_time_summary, record

HERE = Path(__file__).resolve().parent


def report_to(ts: TimeSummary) -> None:
    """Run in a child: three timed sections and two added values."""
    for _ in range(3):
        with ts.report("child.section"):
            pass
    ts.add("child.value", 1.0)
    ts.add("child.value", 3.0)


def record_sections() -> None:
    """Run in a forked child: record() reports to the inherited get_time_summary()."""
    for _ in range(4):
        with record("child.record"):
            pass


def add_value(ts: TimeSummary, value: float) -> float:
    """Run by a Pool: the TimeSummary arrives pickled."""
    ts.add("pool.value", value)
    return value


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("test_profiler_multiprocess")


@pytest.fixture(autouse=True)
def empty_global_summary() -> Iterator[None]:
    get_time_summary().summary(clear=True)
    yield
    get_time_summary().summary(clear=True)


def _run_child(context: str, target: object, *args: object) -> None:
    process = multiprocessing.get_context(context).Process(target=target, args=args)
    process.start()
    process.join()
    assert process.exitcode == 0


def _counts(ts: TimeSummary) -> dict[str, float]:
    summary, _ = ts.summary()
    return {key: state["_n"] for key, state in summary.state_dict().items()}


@pytest.mark.parametrize(
    "context",
    ["fork", pytest.param("spawn", marks=pytest.mark.slow)],  # spawn imports torch again
)
def test_reports_of_a_child_given_the_time_summary_reach_the_parent(
    context: str, children: ModuleType
) -> None:
    mine = TimeSummary()
    mine.add("parent.value", 2.0)
    global_summary = get_time_summary()
    _run_child(context, children.report_to, mine)
    _run_child(context, children.report_to, global_summary)
    mine.synchronize()
    summary, extrema = mine.summary()
    assert _counts(mine) == {"parent.value": 1.0, "child.section": 3.0, "child.value": 2.0}
    assert summary.compute_mean()["child.value"] == 2.0
    assert extrema["child.value.min"] == 1.0
    assert extrema["child.value.max"] == 3.0
    assert extrema["parent.value.max"] == 2.0
    assert _counts(global_summary) == {"child.section": 3.0, "child.value": 2.0}


def test_record_in_a_forked_child_reports_to_the_parents_global_summary() -> None:
    parent = get_time_summary()
    _run_child("fork", record_sections)
    parent.synchronize()
    assert _counts(parent) == {"child.record": 4.0}


def test_a_time_summary_sent_to_a_pool_collects_every_task() -> None:
    ts = TimeSummary()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.starmap(add_value, [(ts, float(v)) for v in range(1, 7)]) == [1, 2, 3, 4, 5, 6]
    summary, extrema = ts.summary()
    assert summary.compute_mean() == {"pool.value": 3.5}
    assert extrema == {"pool.value.min": 1.0, "pool.value.max": 6.0}


class _RecordingDataset(Dataset[int]):
    def __getitem__(self, index: int) -> int:
        with record("getitem"):
            return index

    def __len__(self) -> int:
        return 8


def test_record_in_forked_dataloader_workers_reaches_the_main_process() -> None:
    parent = get_time_summary()
    loader = DataLoader(
        _RecordingDataset(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(int(v) for batch in loader for v in batch) == list(range(8))
    assert _counts(parent) == {"getitem": 8.0}


def test_child_reports_are_added_once_and_cleared_with_the_summary() -> None:
    ts = TimeSummary()
    _run_child("fork", report_to, ts)
    assert _counts(ts) == {"child.section": 3.0, "child.value": 2.0}
    assert _counts(ts) == {"child.section": 3.0, "child.value": 2.0}
    ts.summary(clear=True)
    assert _counts(ts) == {}


def add_many(ts: TimeSummary, count: int) -> None:
    """Run in a child: more messages than one spool file takes (it starts new ones)."""
    for i in range(count):
        ts.add("many", float(i % 2))


def test_many_reports_of_a_child_all_arrive_and_leave_no_files_behind() -> None:
    ts = TimeSummary()
    _run_child("fork", add_many, ts, 100_000)  # 1.4 MB of messages: two files
    summary, extrema = ts.summary()
    assert summary.state_dict() == {"many": {"_x": 50_000.0, "_x2": 50_000.0, "_n": 100_000.0}}
    assert extrema == {"many.min": 0.0, "many.max": 1.0}
    spool = Path(ts._spool.path)  # the files that carried the child's reports
    assert spool.is_dir()
    assert list(spool.iterdir()) == []  # read, and the child has exited: deleted
