"""Durability, proved by injecting every fault (docs/durability.md): for each scenario, every
file-system operation of a reference run (autoload, save, commit, retention, log writes) is
failed in turn, with ``EIO``, with ``ENOSPC`` and by killing the process right there; then the
run is resumed without faults, and the four points of the invariant are checked.

The harness is in this directory: ``_fault_harness.py`` (a scenario from start to end),
``_fault_scenarios.py`` (the scenarios, what a child runs), ``_fault_ops.py`` (the counted
operations and their faults), ``_fault_runs.py`` (forking and reading the children) and
``_fault_checks.py`` (the invariant). The counts of each scenario are printed at the end of
the session (``conftest.py``'s ``pytest_terminal_summary``) and written in
docs/durability.md.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import multiprocessing
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the harness forks its children and reads /proc (Linux)"
)

_HERE = str(Path(__file__).parent)

# The scenarios run in a server process, one per pytest worker, forked by multiprocessing's
# fork server: a process that has imported torch and the library once and runs none of the
# test session's threads (see test_log_report_scale.py, which shares it; the preload is the
# union of both lists). A plain fork of a pytest-xdist worker could inherit a lock held by
# another of its threads. The server warms up once (its first training costs seconds), then
# forks a runner per scenario, which forks the children of each case.
_FORKSERVER = multiprocessing.get_context("forkserver")
_PRELOAD = [
    "pytorch_pfn_extras.reporting",
    "pytorch_pfn_extras.training.extensions",
    "pytorch_pfn_extras.writing",
    "torch.distributed.checkpoint",
]
# The server's own sys.path gets this directory (the pytest processes' does not).
_SERVER = """
import sys

sys.path.insert(0, here)
import _fault_harness

_fault_harness.serve(connection, work)
"""
TIMEOUT = 900  # seconds a scenario may take; each child of a case is killed after 90 s
SHOWN = 40  # failures quoted in the assertion message

RunScenario = Callable[[str, Path, dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="session")
def scenario_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunScenario]:
    """``run(scenario, work, context)``: the scenario's outcome (``_fault_harness.Outcome``
    as a dict, or ``{"error": ...}``), computed by this worker's scenario server."""
    _FORKSERVER.set_forkserver_preload(_PRELOAD)  # no effect once the fork server runs
    connection, remote = _FORKSERVER.Pipe()
    names = {
        "here": _HERE,
        "connection": remote,
        "work": str(tmp_path_factory.mktemp("fault-server")),
    }
    server = _FORKSERVER.Process(target=exec, args=(_SERVER, names), daemon=True)
    server.start()
    remote.close()

    def receive(what: str) -> dict[str, Any]:
        try:
            if connection.poll(TIMEOUT):
                return dict(connection.recv())
        except EOFError:
            pass
        return {"error": f"the scenario server died or sent nothing for {what}"}

    ready = receive("its warm-up")

    def run(scenario: str, work: Path, context: dict[str, Any]) -> dict[str, Any]:
        if "error" in ready:
            return ready
        connection.send((scenario, str(work), context))
        return receive(scenario)

    try:
        yield run
    finally:
        with contextlib.suppress(OSError):
            connection.send(None)
        server.join(30)
        if server.is_alive():
            server.kill()
        connection.close()


def _load_ops() -> ModuleType:
    """``_fault_ops.py`` (this directory is not on the pytest processes' sys.path)."""
    name = "ppe_training_tests_fault_ops"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(_HERE) / "_fault_ops.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _count(root: Path, fault: Any = None) -> tuple[list[tuple[Any, ...]], BaseException | None]:
    """The operations of a small atomic write under ``root`` (counted by the harness's
    interposer, with ``fault``), and the error it raised."""
    ops = _load_ops()
    events = ops.Events(str(root.parent / f"{root.name}.events"))
    counter = ops.Counter(
        events, fault, lambda path: path == "final", lambda path: ops.local_digest(str(root / path))
    )
    error = None
    try:
        with ops.OsInterposer(str(root), counter):
            with open(root / "tmp", "wb") as f:
                f.write(b"data")
            fd = os.open(root / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                os.write(fd, b"0123456789")
            finally:
                os.close(fd)
            os.replace(root / "tmp", root / "final")
            os.listdir(root)
            (root / "dir").mkdir()
            shutil.rmtree(root / "dir")
    except OSError as caught:
        error = caught
    events.flush()
    return ops.read_events(str(root.parent / f"{root.name}.events")), error


def test_the_harness_counts_each_operation_and_fails_the_chosen_one(tmp_path: Path) -> None:
    ops = _load_ops()
    (tmp_path / "a").mkdir()
    records, error = _count(tmp_path / "a")
    assert error is None
    done = [(r[2], r[3]) for r in records if r[0] == "op"]
    assert done == [
        ("open:w", ("tmp",)),
        ("write", ("tmp",)),
        ("close", ("tmp",)),
        ("open:w", ("log",)),
        ("os.write", ("log",)),
        ("replace", ("tmp", "final")),
        ("listdir", (".",)),
        ("mkdir", ("dir",)),
        ("open:r", ("dir",)),  # shutil.rmtree, one operation at a time
        ("scandir", ("dir",)),
        ("rmdir", ("dir",)),
    ]
    assert [r[2] for r in records if r[0] == "commit"] == ["final"]
    # EIO at the rename: nothing renamed, the error names the path; ENOSPC at the log's
    # write: half of it written (a torn write), then the error.
    (tmp_path / "b").mkdir()
    _, error = _count(tmp_path / "b", ops.Fault(5, "EIO"))
    assert isinstance(error, OSError) and error.errno == errno.EIO
    assert error.filename == str(tmp_path / "b" / "tmp")
    assert sorted(os.listdir(tmp_path / "b")) == ["log", "tmp"]
    (tmp_path / "c").mkdir()
    _, error = _count(tmp_path / "c", ops.Fault(4, "ENOSPC"))
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert (tmp_path / "c" / "log").read_bytes() == b"01234"


Check = Callable[..., None]


@pytest.fixture
def inject_every_fault(
    scenario_server: RunScenario, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> Check:
    """``inject_every_fault(scenario, context={})``: every operation x fault case of the
    scenario (``_fault_harness.SCENARIOS``) run and checked; its counts recorded for the
    summary; the test fails with the broken invariants, one line each."""

    def check(scenario: str, context: dict[str, Any] | None = None) -> None:
        result = scenario_server(scenario, tmp_path, context or {})
        if "error" in result:
            pytest.fail(result["error"], pytrace=False)
        failures: list[str] = result["failures"]
        record_property(
            "fault_injection",
            {
                "scenario": scenario,
                "title": result["title"],
                "operations": result["operations"],
                "faulted": result["faulted"],
                "faults": result["faults"],
                "cases": result["cases"],
                "failures": len(failures),
                "refused": len(result["refused"]),
                "sampled": result["sampled"],
                "resumes": result["resumes"],
                "kinds": result["kinds"],
            },
        )
        assert result["cases"] > 0, f"{scenario}: no case ran"
        if failures:
            shown = "\n".join(failures[:SHOWN])
            more = f"\n... and {len(failures) - SHOWN} more" if len(failures) > SHOWN else ""
            pytest.fail(
                f"{len(failures)} broken invariant(s) in {result['cases']} cases of "
                f"{scenario}:\n{shown}{more}",
                pytrace=False,
            )

    return check


# The longest first: pytest-xdist hands them out in this order.
def test_default_snapshots_through_pfio_on_s3_survive_every_fault(
    inject_every_fault: Check, s3_server: Any
) -> None:
    credentials = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    context = {
        "endpoint": s3_server.endpoint,
        "bucket": s3_server.new_bucket(),
        "env": {name: os.environ[name] for name in credentials},
    }
    inject_every_fault("default_s3", context)


def test_sharded_snapshots_of_2_ranks_survive_a_fault_on_either_rank(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("sharded_2_ranks")


def test_distributed_snapshots_of_2_ranks_survive_a_fault_on_either_rank(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("distributed_2_ranks")


def test_a_sharded_snapshot_rewritten_under_its_name_survives_every_fault(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("sharded_rewrite")


def test_sharded_retention_on_the_local_disk_keeps_foreign_entries_whatever_fails(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("sharded_retention")


def test_default_snapshots_with_retention_keep_foreign_entries_whatever_fails(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("default")


def test_asynchronous_sharded_snapshots_survive_every_fault(inject_every_fault: Check) -> None:
    inject_every_fault("sharded_async")


def test_an_appended_log_holds_each_entry_once_whatever_fails(inject_every_fault: Check) -> None:
    inject_every_fault("log_append")


def test_a_rewritten_json_log_holds_each_entry_once_whatever_fails(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("log_rewrite")


def test_a_default_snapshot_rewritten_under_its_name_survives_every_fault(
    inject_every_fault: Check,
) -> None:
    inject_every_fault("default_rewrite")


def test_snapshot_object_survives_every_fault(inject_every_fault: Check) -> None:
    inject_every_fault("snapshot_object")
