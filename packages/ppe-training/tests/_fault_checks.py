"""The invariant (docs/durability.md), checked on what a case's runs reported and left; and
the choice of the operations to fail."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable
from typing import Any

from _fault_runs import Record, Runner
from _fault_scenarios import END, Scenario

# The operations kept first when a scenario has more than its budget: those that change what
# a directory holds or write without a buffer (commits, retention, cleanup, the log's
# appends in place), then those that open or read a file, those that list a directory or ask
# about a path, syncs, flushes and closes, and last the buffered writes of a file's data (a
# kill there leaves what a kill at its close does).
_PRIORITY = {
    **dict.fromkeys(
        (
            "replace",
            "rename",
            "unlink",
            "rmdir",
            "mkdir",
            "makedirs",
            "remove_tree",
            "symlink",
            "link",
            "truncate",
            "ftruncate",
            "os.write",
            "pwrite",
            "sendfile",
        ),
        0,
    ),
    **dict.fromkeys(("open:r", "read", "open:w"), 1),
    **dict.fromkeys(("listdir", "scandir", "exists", "isdir", "size"), 2),
    **dict.fromkeys(("fsync", "fsync_dir", "flush", "close"), 3),
}


def select_operations(
    operations: list[tuple[int, str, tuple[str, ...], str]], budget: int | None
) -> list[int]:
    """The indices of the operations to fail, in order.

    Every operation, except in a run of consecutive operations of one kind on one path (the
    ``write`` calls of ``torch.save`` into one file, the ``read`` calls of ``torch.load``):
    there its first and last one. Beyond ``budget``, a deterministic sample: those of the
    first class of ``_PRIORITY`` (commits, retention, cleanup), then the first operation of
    each other kind, then the other classes in their order; the part that does not fit whole
    evenly spaced.
    """
    chosen: list[int] = []
    i = 0
    while i < len(operations):
        j = i
        key = operations[i][1:3]
        while j + 1 < len(operations) and operations[j + 1][1:3] == key:
            j += 1
        chosen.extend(sorted({operations[i][0], operations[j][0]}))
        i = j + 1
    if budget is None or len(chosen) <= budget:
        return chosen
    kinds = {op[0]: op[1] for op in operations}

    def priority(index: int) -> int:
        return _PRIORITY.get(kinds[index], 4)

    def spaced(members: list[int], room: int) -> list[int]:
        if len(members) <= room:
            return members
        return [members[k * len(members) // room] for k in range(max(room, 0))]

    kept = spaced([index for index in chosen if priority(index) == 0], budget)
    firsts: dict[str, int] = {}
    for index in chosen:
        if priority(index) > 0:
            firsts.setdefault(kinds[index], index)
    kept += sorted(firsts.values(), key=lambda index: (priority(index), index))
    kept = kept[:budget]
    for level in (1, 2, 3, 4):
        members = [index for index in chosen if priority(index) == level and index not in kept]
        kept += spaced(members, budget - len(kept))
    return sorted(kept)


@dataclasses.dataclass
class Commit:
    """A snapshot committed: its name, the iteration it holds, the digest of its content."""

    name: str
    iteration: int
    digest: str | None


@dataclasses.dataclass(frozen=True)
class Resume:
    """A resume: each rank's record, and what it left (entries, the log's bytes, the other
    files of the output directory: see :meth:`Checker._other`)."""

    records: list[Record]
    entries: dict[str, str | None]
    log: bytes | None
    side: dict[str, bytes]


def attribute(
    scenario: Scenario,
    records: list[Record],
    start: int,
    stop: int,
    known: dict[str | None, int],
) -> list[Commit]:
    """The commits the coordinator (rank 0) reported, each with the iteration it holds.

    That of a snapshot with the same content, when one is in ``known`` (a snapshot set aside
    during a rewrite and put back); for a commit during autoload (a complete temporary that
    a killed run left, recovered), that of the snapshot autoload started from (``start``);
    else that of the save it belongs to (the next save of its name in the order of the saves
    from ``start`` to ``stop``). ``known`` gets the commits' digests.
    """
    saves = scenario.saves(start, stop)
    commits = []
    at = 0
    record = records[0]
    for index, path, digest in record.commits:
        name = os.path.basename(path)
        if digest in known:
            iteration = known[digest]
        elif record.started is None or index < record.autoload_ops:
            iteration = start if scenario.name_at(start) == name else -1
        else:
            while at < len(saves) and scenario.name_at(saves[at]) != name:
                at += 1
            iteration = saves[at] if at < len(saves) else -1
            at += 1
        known[digest] = iteration
        commits.append(Commit(name, iteration, digest))
    return commits


class Checker:
    """The invariant, checked on what a case's runs reported and left.

    Args:
        runner: What runs the children.
        reference: What the fault-free runs established.
        refused: Where resumes that failed loudly are listed.
    """

    def __init__(self, runner: Runner, reference: Reference, refused: list[str]) -> None:
        self.runner = runner
        self.scenario = runner.scenario
        self.reference = reference
        self.refused = refused
        self.shared = 0  # resumes taken from a former case that left the same files
        self._resumes: dict[tuple[tuple[str, str], ...], Resume] = {}

    def check_case(self, case: str, fault: tuple[int, int, str]) -> list[str]:
        """Run one case (the faulted run, the checks, the resume, the checks): its problems."""
        scenario, runner, reference = self.scenario, self.runner, self.reference
        problems: list[str] = []
        committed: dict[str, Commit] = {c.name: c for c in reference.setup_commits}
        known: dict[str | None, int] = {c.digest: c.iteration for c in reference.setup_commits}
        faulted = runner.run("run", case, fault)
        rank, index, _kind = fault
        expected_op = reference.runs[rank].ops_by_index.get(index)
        reached = faulted[rank].fault
        if reached is None:
            problems.append(
                f"the faulted run never reached operation {index} "
                f"({op_text(expected_op)}); it ended: {faulted[rank].status} "
                f"{faulted[rank].key_line()}"
            )
        elif expected_op is not None and _normal(reached[1:3]) != _normal(expected_op[1:3]):
            problems.append(
                f"operation {index} of the faulted run was {op_text(reached)}, not "
                f"{op_text(expected_op)} as in the reference (the order is not deterministic)"
            )
        # Invariant 1 in the faulted run itself: its autoload read the newest snapshot, or
        # it failed loudly.
        for r, record in enumerate(faulted):
            where = f"faulted run, rank {r}"
            problems += self._check_start(record, reference.setup_newest, where)
            if r == rank and record.raised is not None and record.started is None:
                problems += self._check_loud(record, case, where)
            if record.status.startswith("hung"):
                problems.append(f"{where}: {record.status}\n{record.output[-800:]}")
        start = faulted[0].started[0] if faulted[0].started else scenario.setup_stop
        new = attribute(scenario, faulted, start, END, known)
        problems += self._commit(committed, new)
        after_fault = runner.store.entries(case)
        problems += self._check_kept(committed, after_fault, strict=False)
        problems += self._check_foreign(after_fault, "after the faulted run")
        log = self._log_of(case)
        problems += self._check_log(log, strict=False)
        # Invariant 1 after the fault: the fault-free resume loads the newest committed one.
        newest = max((c.iteration for c in committed.values()), default=0)
        resume = self._resume(case, after_fault)
        refused = self._check_resume(resume.records, case, newest, problems)
        resumed = resume.records
        resume_start = resumed[0].started[0] if resumed[0].started else 0
        problems += self._commit(committed, attribute(scenario, resumed, resume_start, END, known))
        problems += self._check_kept(committed, resume.entries, strict=True)
        problems += self._check_foreign(resume.entries, "after the resume")
        if not refused:
            problems += self._check_log(resume.log, strict=True)
            problems += self._check_torn(log, resume)
        return problems

    def _log_of(self, case: str) -> bytes | None:
        name = self.scenario.log
        return None if name is None else self.runner.store.read(case, f"out/{name}")

    def _resume(self, case: str, state: dict[str, str | None]) -> Resume:
        """The fault-free resume of ``case``: run, unless a former case left the same files
        (the same names, temporaries' random parts aside, and contents), whose resume and
        what it left are then taken (the code under test is deterministic)."""
        key = tuple(
            sorted((re.sub(r"\.tmp-[^/]*", ".tmp-*", p), d or "") for p, d in state.items())
        )
        known = self._resumes.get(key)
        if known is not None:
            self.shared += 1
            return known
        records = self.runner.run("resume", case)
        store = self.runner.store
        others = [p for p in store.entries(case) if p.startswith("out/") and self._other(p)]
        side = {p: store.read(case, p) or b"" for p in others}
        resume = Resume(records, store.entries(case), self._log_of(case), side)
        self._resumes[key] = resume
        return resume

    def _check_resume(
        self, resumed: list[Record], case: str, newest: int, problems: list[str]
    ) -> bool:
        """Check the resume's ranks (into ``problems``); whether it refused loudly to start
        (invariant 1 allows it: an error naming a file), which skips the log's check."""
        refusals = [
            r
            for r, record in enumerate(resumed)
            if record.raised is not None
            and record.started is None
            and not self._check_loud(record, case, "")
        ]
        if refusals:
            self.refused.append(f"resume, rank {refusals[0]}: {resumed[refusals[0]].key_line()}")
        for r, record in enumerate(resumed):
            where = f"resume, rank {r}"
            problems += self._check_start(record, newest, where)
            if refusals:
                continue  # the others end because the refusing rank did
            if record.raised is not None:
                problems.append(
                    f"{where}: raised {record.key_line()}\n{record.raised['traceback'][-1500:]}"
                )
            elif record.status != "exit 0":
                problems.append(f"{where}: {record.status}\n{record.output[-800:]}")
            elif not self.scenario.objects:
                final = self.reference.params.get(END)
                if record.finished is None or record.finished[1] != final:
                    problems.append(
                        f"{where}: the training ended with other weights than the reference "
                        f"({record.finished and record.finished[1]} != {final})"
                    )
        return bool(refusals)

    # ------------------------------------------------------------------ invariant 1

    def _check_start(self, record: Record, newest: int, where: str) -> list[str]:
        """Autoload started from the newest committed snapshot (iteration ``newest``), or
        from a newer one whose weights are the reference's there (a complete temporary a
        killed run left, recovered), never from an older one."""
        if record.started is None:
            return []
        iteration, params = record.started
        if self.scenario.objects:
            # The manager starts at 0; the loaded weights tell which snapshot was read.
            loaded = [i for i, p in self.reference.params.items() if p == params]
            if not any(i >= newest for i in loaded):
                return [
                    f"{where}: autoload loaded the weights of iteration {loaded or '?'}, not "
                    f"those of the newest committed snapshot (iteration {newest})"
                ]
            return []
        if iteration < newest:
            return [
                f"{where}: autoload resumed from iteration {iteration}, not from the newest "
                f"committed snapshot (iteration {newest}); warnings: {record.warnings[-3:]}"
            ]
        if params != self.reference.params.get(iteration):
            return [
                f"{where}: autoload resumed from iteration {iteration} (the newest committed "
                f"snapshot is of iteration {newest}) with other weights than the reference's"
            ]
        return []

    def _check_loud(self, record: Record, case: str, where: str) -> list[str]:
        """An error must name what it could not read or write: an entry of the output
        directory, a path the run used, or the output directory (its bucket)."""
        assert record.raised is not None
        text = record.raised["chain"]
        names = {os.path.basename(n) for n in self.runner.store.entries(case)}
        names |= {os.path.basename(n) for n in self.reference.paths}
        names |= {os.path.join(case, "out"), self.runner.context.get("bucket", "")}
        if any(name and name in text for name in names):
            return []
        return [f"{where}: failed without naming a file: {record.key_line()}"]

    # ------------------------------------------------------------------ invariant 2

    def _commit(self, committed: dict[str, Commit], new: Iterable[Commit]) -> list[str]:
        problems = []
        for commit in new:
            old = committed.get(commit.name)
            if (
                old is not None
                and old.digest != commit.digest
                and old.iteration >= commit.iteration
            ):
                problems.append(
                    f"the committed snapshot {commit.name} (iteration {old.iteration}) was "
                    f"replaced by one of iteration {commit.iteration}"
                )
            committed[commit.name] = commit
        return problems

    def _check_kept(
        self, committed: dict[str, Commit], entries: dict[str, str | None], strict: bool
    ) -> list[str]:
        """Every committed snapshot is there (``strict``: under its name; else anywhere in
        the output directory, e.g. set aside during a rewrite), unless ``n_retains`` newer
        committed ones are."""
        digests = {d for path, d in entries.items() if path.startswith("out/")}

        def present(commit: Commit) -> bool:
            if strict:
                return entries.get(f"out/{commit.name}") == commit.digest
            return commit.digest in digests

        problems = []
        n_retains = self.scenario.n_retains
        for commit in committed.values():
            if present(commit):
                continue
            newer = [c for c in committed.values() if c.iteration > commit.iteration]
            if n_retains > 0 and sum(present(c) for c in newer) >= n_retains:
                continue
            where = "after the resume" if strict else "after the faulted run"
            now = entries.get(f"out/{commit.name}", "missing")
            problems.append(
                f"{where}: the committed snapshot {commit.name} (iteration {commit.iteration}) "
                f"is {'gone' if now in (None, 'missing') else 'changed'} "
                f"(out/ holds {sorted(p[4:] for p in entries if p.startswith('out/'))})"
            )
        return problems

    # ------------------------------------------------------------------ invariant 3

    def _check_foreign(self, entries: dict[str, str | None], where: str) -> list[str]:
        problems = []
        for path, digest in self.reference.foreign.items():
            if entries.get(path) != digest:
                what = "deleted" if path not in entries else "replaced"
                problems.append(f"{where}: the foreign entry {path} was {what}")
        return problems

    # ------------------------------------------------------------------ invariant 4

    def _other(self, path: str) -> bool:
        """Whether ``path`` (in the output directory) is neither a snapshot, the log, nor a
        temporary: where a log's torn tail may be set aside."""
        name = os.path.basename(path)
        return not (self.scenario.is_snapshot(path) or name == self.scenario.log or ".tmp-" in name)

    def _check_torn(self, log: bytes | None, resume: Resume) -> list[str]:
        """A log the fault left torn (a json-lines file not ended by a newline, a JSON array
        cut short): the resume warned naming it, and kept its torn tail in a side file."""
        name = self.scenario.log
        if name is None or log is None:
            return []
        try:
            parse_log(log, name, strict=True)
        except ValueError:
            pass
        else:
            return []
        problems = []
        if not any(name in warning for warning in resume.records[0].warnings):
            problems.append(
                f"the resume set the torn tail of out/{name} aside without a warning naming "
                f"it (warnings: {resume.records[0].warnings[-3:]})"
            )
        tail = log[log.rfind(b"\n") + 1 :] if name.endswith(".jsonl") else b""
        if tail and not any(tail in data for data in resume.side.values()):
            problems.append(
                f"the torn tail of out/{name} ({tail[:60]!r}) is in no side file after the "
                f"resume (out/ holds {sorted(resume.entries)})"
            )
        return problems

    def _check_log(self, data: bytes | None, strict: bool) -> list[str]:
        name = self.scenario.log
        if name is None:
            return []
        expected = self.reference.log
        where = "after the resume" if strict else "after the faulted run"
        if data is None:
            return [] if not strict else [f"{where}: the log out/{name} is missing"]
        try:
            entries = parse_log(data, name, strict=strict)
        except ValueError as error:
            return [f"{where}: the log out/{name} is not valid: {error}"]
        got = [without_time(e) for e in entries]
        if strict and got != expected:
            return [
                f"{where}: the log holds the iterations {[e.get('iteration') for e in got]}, "
                f"not each of 1-{END} once as the reference"
            ]
        if not strict and got != expected[: len(got)]:
            return [
                f"{where}: the log's complete entries (iterations "
                f"{[e.get('iteration') for e in got]}) are not the reference's first ones"
            ]
        return []


def without_time(entry: Any) -> Any:
    if isinstance(entry, dict):
        return {k: v for k, v in entry.items() if k != "elapsed_time"}
    return entry


def parse_log(data: bytes, name: str, *, strict: bool) -> list[Any]:
    """The entries of a log file; ``strict``: the whole file must be valid; else a torn last
    entry (no newline at the end of a json-lines file; a JSON array cut short) is ignored."""
    text = data.decode()
    if name.endswith(".jsonl"):
        lines = text.split("\n")
        tail = lines.pop()
        if tail and strict:
            message = f"its last line is not ended: {tail[:80]!r}"
            raise ValueError(message)
        try:
            return [json.loads(line) for line in lines]
        except json.JSONDecodeError as error:
            message = f"a line is not JSON: {error}"
            raise ValueError(message) from error
    try:
        return list(json.loads(text))
    except json.JSONDecodeError as error:
        if strict:
            message = f"not JSON: {error}"
            raise ValueError(message) from error
    # A JSON array cut short: its complete items.
    decoder = json.JSONDecoder()
    at = text.find("[") + 1
    if at == 0:
        message = f"not a JSON array: {text[:80]!r}"
        raise ValueError(message)
    entries: list[Any] = []
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return entries
        try:
            entry, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return entries
        entries.append(entry)


def _normal(op: Iterable[Any]) -> tuple[Any, ...]:
    """An operation without what differs between runs (temporaries' random names)."""
    return tuple(
        tuple(re.sub(r"\.tmp-[^/]*", ".tmp-*", p) for p in item)
        if isinstance(item, tuple)
        else item
        for item in op
    )


def op_text(op: tuple[Any, ...] | None) -> str:
    if op is None:
        return "none"
    return f"{op[1]} {' -> '.join(op[2])}"


@dataclasses.dataclass
class RankReference:
    """The reference run of one rank: its operations by index."""

    ops: list[tuple[int, str, tuple[str, ...], str]]
    ops_by_index: dict[int, tuple[int, str, tuple[str, ...], str]]


@dataclasses.dataclass
class Reference:
    """What the fault-free runs establish."""

    runs: list[RankReference]
    setup_commits: list[Commit]
    setup_newest: int
    params: dict[int, list[float]]
    foreign: dict[str, str | None]
    log: list[Any]
    paths: set[str]
