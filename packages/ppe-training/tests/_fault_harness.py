"""The fault-injection harness of ``test_fault_injection.py``: one scenario from start to end.

For a scenario (``_fault_scenarios.SCENARIOS``):

1. the *setup* trains without faults; foreign entries named like old snapshots are placed
   next to its snapshots: the base directory every case starts from a copy of;
2. the *reference* run trains on from the base, every file-system operation counted
   (``_fault_ops``): autoload, save, commit, retention, log writes;
3. for each operation ``N`` (all of them, or a deterministic sample:
   ``_fault_checks.select_operations``), each fault of ``_fault_ops.FAULTS`` and each rank:
   the run again with that fault at ``N`` (*faulted*), then without faults (*resume*), and
   the checks of the invariant after each (``_fault_checks.Checker``).

:func:`serve` is the entry point of the process, forked by multiprocessing's fork server,
that runs the scenarios of one pytest worker.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import traceback
from typing import Any

import _fault_ops as ops
from _fault_checks import (
    Checker,
    Commit,
    RankReference,
    Reference,
    attribute,
    op_text,
    parse_log,
    select_operations,
    without_time,
)
from _fault_runs import Runner, SetupError, import_all, status_text, warm_up
from _fault_scenarios import SCENARIOS


@dataclasses.dataclass
class Outcome:
    """The result of one scenario, sent back to the test.

    Attributes:
        scenario: Its name.
        title: What it covers.
        operations: The operations of the reference run (per rank, summed).
        kinds: How many of each kind.
        faulted: The operations faults were injected at (summed over the ranks).
        faults: The faults injected at each.
        cases: Operation x fault cases run.
        failures: One text per broken invariant (a case may have several).
        refused: Resumes that failed loudly (allowed by invariant 1: an error naming a file).
        sampled: Whether the operations were sampled (more than the budget).
        resumes: The resumes run (cases whose faults left the same files share one).
    """

    scenario: str
    title: str
    operations: int = 0
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    faulted: int = 0
    faults: int = len(ops.FAULTS)
    cases: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    sampled: bool = False
    resumes: int = 0


def _failed(what: str, records: list[Any], done: str) -> str | None:
    """What went wrong in a fault-free run (``done``: the attribute it must have reported),
    or ``None``."""
    for rank, record in enumerate(records):
        if record.status != "exit 0" or getattr(record, done) is None:
            details = (record.raised or {}).get("traceback", record.output)[-2000:]
            return (
                f"the {what} (rank {rank}) failed: {record.status} {record.key_line()}\n{details}"
            )
    return None


def _prepare(runner: Runner) -> tuple[Reference, str]:
    """The base every case starts from a copy of (the setup's snapshots and the foreign
    entries), and what the fault-free runs establish.

    Raises:
        SetupError: The setup or the reference run failed.
    """
    scenario, store = runner.scenario, runner.store
    base = "base" if scenario.s3 else os.path.join(runner.work, "base")
    if not scenario.s3:
        os.makedirs(os.path.join(base, "out"))
    params: dict[int, list[float]] = {}
    setup_commits: list[Commit] = []
    if scenario.setup_stop:
        setup = runner.run("setup", base)
        problem = _failed("setup", setup, "started")
        if problem is not None:
            raise SetupError(problem)
        assert setup[0].started is not None
        params[0] = setup[0].started[1]
        params.update(setup[0].iterations)
        setup_commits = attribute(scenario, setup, 0, scenario.setup_stop, {})
        import_all(setup[0].modules)  # the cases' children need not import them again
    before = store.entries(base)
    if scenario.foreign:
        store.place_foreign(scenario, base)
    foreign = {p: d for p, d in store.entries(base).items() if p not in before}
    case = "reference" if scenario.s3 else os.path.join(runner.work, "reference")
    store.copy(base, case)
    runs = runner.run("run", case)
    problem = _failed("reference run", runs, "finished")
    if problem is not None:
        raise SetupError(problem)
    import_all(runs[0].modules)
    if runs[0].started is not None:
        params.setdefault(0, runs[0].started[1])
    params.update(runs[0].iterations)
    log: list[Any] = []
    if scenario.log is not None:
        data = store.read(case, f"out/{scenario.log}") or b""
        log = [without_time(e) for e in parse_log(data, scenario.log, strict=True)]
    store.remove(case)
    reference = Reference(
        runs=[RankReference(r.ops, {op[0]: op for op in r.ops}) for r in runs],
        setup_commits=setup_commits,
        setup_newest=max((c.iteration for c in setup_commits), default=0),
        params=params,
        foreign=foreign,
        log=log,
        paths={p for record in runs for op in record.ops for p in op[2]},
    )
    return reference, base


def run_scenario(name: str, work: str, context: dict[str, Any]) -> Outcome:
    """Everything for one scenario: the reference, then each operation x fault case."""
    scenario = SCENARIOS[name]
    runner = Runner(scenario, work, context)
    outcome = Outcome(scenario.name, scenario.title)
    try:
        reference, base = _prepare(runner)
    except SetupError as error:
        outcome.failures.append(f"{scenario.name}: {error}")
        return outcome
    checker = Checker(runner, reference, outcome.refused)
    kinds: collections.Counter[str] = collections.Counter()
    plan: list[tuple[int, int]] = []
    for rank, run in enumerate(reference.runs):
        kinds.update(op[1] for op in run.ops)
        outcome.operations += len(run.ops)
        chosen = select_operations(run.ops, scenario.budget)
        outcome.sampled = outcome.sampled or len(chosen) < len(run.ops)
        plan += [(rank, index) for index in chosen]
    outcome.kinds = dict(kinds)
    outcome.faulted = len(plan)
    number = 0
    for rank, index in plan:
        for kind in ops.FAULTS:
            number += 1
            case = os.path.join(runner.work, f"c{number}") if not scenario.s3 else f"c{number}"
            runner.store.copy(base, case)
            try:
                problems = checker.check_case(case, (rank, index, kind))
            finally:
                runner.store.remove(case)
            outcome.cases += 1
            op = reference.runs[rank].ops_by_index[index]
            head = f"{scenario.name}: rank {rank}, operation {index} ({op_text(op)}), fault {kind}"
            outcome.failures += [f"{head}: {p}" for p in problems]
    outcome.resumes = outcome.cases - checker.shared
    return outcome


def serve(connection: Any, work: str) -> None:
    """The entry point of the fork server's child that runs the scenarios of one pytest
    worker: warm up (:func:`warm_up`), then for each request ``(scenario, work, context)``
    received through ``connection`` (until ``None``), fork a runner that runs the scenario
    and send back its :class:`Outcome` as a dict (or ``{"error": ...}``)."""
    try:
        warm_up(work)
    except BaseException as error:
        connection.send({"error": "".join(traceback.format_exception(error))[-6000:]})
        return
    connection.send({"ready": True})
    while True:
        request = connection.recv()
        if request is None:
            return
        connection.send(_fork_runner(*request))


def _fork_runner(name: str, work: str, context: dict[str, Any]) -> dict[str, Any]:
    """The result of :func:`run_scenario` in a forked runner (the warmed process stays as
    it is for the next scenario)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the runner
        os.close(read)
        code = 1
        try:
            try:
                result: dict[str, Any] = dataclasses.asdict(run_scenario(name, work, context))
            except BaseException as error:
                result = {"error": "".join(traceback.format_exception(error))[-6000:]}
            data = pickle.dumps(result)
            view = memoryview(data)
            while view:
                view = view[os.write(write, view) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    with os.fdopen(read, "rb") as f:
        chunks.append(f.read())
    _, code = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if not data:
        return {"error": f"the runner of {name!r} died: {status_text(code)}"}
    return dict(pickle.loads(data))
