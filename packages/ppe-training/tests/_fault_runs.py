"""Running the children of a case: forking them, waiting for them, reading their records;
the views of a case's files (local disk, S3) the checks use; the runner's warm-up.

The children are forked with ``os.fork`` by a process that has imported torch and the
library and run their costly first calls once (:func:`warm_up`): a child costs a fork, not
an interpreter. That process never runs the library (its writers start threads) nor a
process group, so it stays safe to fork.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import importlib
import io
import os
import shutil
import signal
import sys
import time
import warnings
from collections.abc import Iterable
from typing import Any

import _fault_ops as ops
from _fault_scenarios import Child, Scenario, batch_at, make_model, run_child

CHILD_TIMEOUT = 90.0  # seconds a child may take (a hang is a failure, never a wait)
PEER_GRACE = 15.0  # seconds a rank may outlive its peer; it is stopped sooner once it waits
STOPPED = "stopped by the harness once its peer had ended and it waited"
FOREIGN_TEXT = b"a note of the user, named like a snapshot: not a snapshot\n"


@dataclasses.dataclass
class Record:
    """What one child reported.

    Attributes:
        ops: ``(index, kind, paths, outcome)`` of each operation that ended.
        fault: ``(index, kind, paths, fault)`` of the injected fault, if it was reached.
        commits: ``(index, path, digest)`` of each rename onto a snapshot name.
        started: ``(iteration, params)`` once the extensions started (autoload done).
        autoload_ops: How many operations the run had done then.
        iterations: The parameters after each iteration.
        finished: ``(iteration, params)`` at the end of training.
        raised: The error the run raised (``_describe``), if any.
        warnings: The warnings it issued.
        modules: The modules imported when it ended.
        status: How the child ended (``"exit 0"``, ``"killed by the fault"``...).
        output: The tail of its stdout/stderr.
    """

    ops: list[tuple[int, str, tuple[str, ...], str]] = dataclasses.field(default_factory=list)
    fault: tuple[Any, ...] | None = None
    commits: list[tuple[int, str, str | None]] = dataclasses.field(default_factory=list)
    started: tuple[int, list[float]] | None = None
    autoload_ops: int = 0
    iterations: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    finished: tuple[int, list[float]] | None = None
    raised: dict[str, str] | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    modules: list[str] = dataclasses.field(default_factory=list)
    status: str = ""
    output: str = ""

    @classmethod
    def read(cls, path: str) -> Record:
        record = cls()
        for event in ops.read_events(path):
            kind = event[0]
            if kind == "op":
                record.ops.append(tuple(event[1:]))
            elif kind == "fault":
                record.fault = tuple(event[1:])
            elif kind == "commit":
                record.commits.append(tuple(event[1:]))
            elif kind == "started":
                record.started = (event[1], event[2])
                record.autoload_ops = event[3]
            elif kind == "iteration":
                record.iterations[event[1]] = event[2]
            elif kind == "finished":
                record.finished = (event[1], event[2])
            elif kind == "raised":
                record.raised = event[1]
            elif kind == "warning":
                record.warnings.append(event[1])
            elif kind == "modules":
                record.modules = event[1]
        record.ops.sort()
        return record

    def key_line(self) -> str:
        """The last line of the error raised (what a report quotes)."""
        if self.raised is None:
            return ""
        return self.raised["chain"].splitlines()[0][:400]


def status_text(code: int) -> str:
    """How a child ended, from its wait status."""
    if os.WIFSIGNALED(code):
        return f"killed by signal {os.WTERMSIG(code)}"
    status = os.WEXITSTATUS(code)
    if status == ops.KILLED:
        return "killed by the fault"
    return f"exit {status}"


class Runner:
    """Forks the children of one scenario's runs, waits for them and reads their records.

    Args:
        scenario: The scenario.
        work: A scratch directory (local) of this scenario.
        context: ``{"endpoint", "bucket", "env"}`` of the S3 server (S3 scenarios).
    """

    def __init__(self, scenario: Scenario, work: str, context: dict[str, Any]) -> None:
        self.scenario = scenario
        self.work = os.path.abspath(work)
        self.context = context
        self.store = S3Store(context) if scenario.s3 else LocalStore()
        self._forks = 0

    # ------------------------------------------------------------------ forking

    def _fork(self, child: Child) -> int:
        log = child.events + ".log"
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                gc.disable()
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                code = run_child(self.scenario, child, self.context)
            finally:
                os._exit(code)
        return pid

    def run(self, phase: str, case: str, fault: tuple[int, int, str] | None = None) -> list[Record]:
        """Run ``phase`` on every rank (the fault, ``(rank, index, kind)``, on its rank).

        Returns:
            Each rank's record.
        """
        self._forks += 1
        tag = f"{os.path.basename(case)}-{phase}-{self._forks}"
        store = os.path.join(self.work, f"{tag}.store")
        children = []
        for rank in range(self.scenario.ranks):
            own = None
            if fault is not None and fault[0] == rank:
                own = ops.Fault(fault[1], fault[2])
            events = os.path.join(self.work, f"{tag}.{rank}.events")
            children.append(Child(phase, case, events, own, rank, store))
        pids = [self._fork(child) for child in children]
        codes = _wait_all(pids, stop_waiting=fault is not None)
        records = []
        for child, code in zip(children, codes, strict=True):
            record = Record.read(child.events)
            if code is None:
                record.status = "hung (killed by the harness)"
            elif code == -1:
                record.status = STOPPED
            else:
                record.status = status_text(code)
            with contextlib.suppress(OSError), open(child.events + ".log", "rb") as f:
                record.output = f.read()[-3000:].decode(errors="replace")
            for path in (child.events, child.events + ".log"):
                with contextlib.suppress(OSError):
                    os.remove(path)
            records.append(record)
        with contextlib.suppress(OSError):
            os.remove(store)
        return records


def _cpu_and_state(pid: int) -> tuple[int, str]:
    """The CPU ticks a process has used and its state letter (``R``, ``S``...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0, "?"
    return int(fields[11]) + int(fields[12]), fields[0]


def _wait_all(pids: list[int], *, stop_waiting: bool) -> list[int | None]:
    """Wait for the children (the ranks of a case).

    A child running ``CHILD_TIMEOUT`` s is killed: its status is ``None`` (a hang). With
    ``stop_waiting`` (a run with a fault), once a rank has ended, another that sleeps
    without using CPU for a moment waits for it (in a collective, until the process group's
    timeout): it is killed, its status ``-1``; as it is after ``PEER_GRACE`` s anyway.
    """
    codes: dict[int, int | None] = {}
    start = time.monotonic()
    first_end: float | None = None
    idle: dict[int, tuple[int, float]] = {}
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = code
                    first_end = first_end or time.monotonic()
        now = time.monotonic()
        for pid in pids:
            if pid in codes:
                continue
            stop: int | None = 0
            if now - start > CHILD_TIMEOUT:
                stop = None
            elif stop_waiting and first_end is not None:
                ticks, state = _cpu_and_state(pid)
                seen, since = idle.get(pid, (-1, now))
                if now - first_end > PEER_GRACE:
                    stop = -1
                elif ticks != seen or state != "S":
                    idle[pid] = (ticks, now)  # working (or runnable)
                elif now - since > 0.3:
                    stop = -1  # asleep, no CPU used since: waiting for its peer
            if stop != 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                codes[pid] = stop
        if len(codes) < len(pids):
            time.sleep(0.002 if now - start < 0.05 else 0.01)
    return [codes[pid] for pid in pids]


# ---------------------------------------------------------------------------- storage views


class LocalStore:
    """The cases' directories on the local disk, as the checks see them."""

    def copy(self, source: str, destination: str) -> None:
        shutil.copytree(source, destination, symlinks=True)

    def remove(self, case: str) -> None:
        shutil.rmtree(case, ignore_errors=True)

    def entries(self, case: str) -> dict[str, str | None]:
        """The digest of each entry of ``case/out`` (and of what ``case/outside`` holds)."""
        found: dict[str, str | None] = {}
        for folder in ("out", "outside"):
            directory = os.path.join(case, folder)
            with contextlib.suppress(FileNotFoundError):
                for name in sorted(os.listdir(directory)):
                    found[f"{folder}/{name}"] = ops.local_digest(os.path.join(directory, name))
        return found

    def read(self, case: str, relative: str) -> bytes | None:
        try:
            with open(os.path.join(case, relative), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def place_foreign(self, scenario: Scenario, case: str) -> None:
        """A text file, a symlink to a copy of a snapshot outside, an unknown directory."""
        out = os.path.join(case, "out")
        with open(os.path.join(out, scenario.name_at(1)), "wb") as f:
            f.write(FOREIGN_TEXT)
        outside = os.path.join(case, "outside")
        os.makedirs(outside)
        linked = os.path.join(outside, "linked")
        source = os.path.join(out, scenario.name_at(2))
        if os.path.isdir(source):
            shutil.copytree(source, linked)
        else:
            shutil.copyfile(source, linked)
        os.symlink(os.path.join("..", "outside", "linked"), os.path.join(out, scenario.name_at(3)))
        unknown = os.path.join(out, scenario.name_at(0))
        os.makedirs(unknown)
        with open(os.path.join(unknown, "notes.txt"), "wb") as f:
            f.write(FOREIGN_TEXT)


class S3Store:
    """The cases' key prefixes on the S3 server (``case`` is a prefix like ``c12``)."""

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context
        self._client: Any = None
        self.bucket = context["bucket"]
        # A first pfio S3 file system here loads botocore's models once for every child
        # (pfio checks the bucket with one request; its connection stays unused).
        import pfio  # type: ignore[import-untyped]

        os.environ.update(context["env"])
        self._warm = pfio.v2.from_url(f"s3://{self.bucket}", endpoint=context["endpoint"])

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # type: ignore[import-untyped]

            os.environ.update(self._context["env"])
            self._client = boto3.client("s3", endpoint_url=self._context["endpoint"])
        return self._client

    def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/"):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def copy(self, source: str, destination: str) -> None:
        for key in self._keys(source):
            self.client.copy_object(
                Bucket=self.bucket,
                Key=destination + key[len(source) :],
                CopySource={"Bucket": self.bucket, "Key": key},
            )

    def remove(self, case: str) -> None:
        """Nothing: a case's objects stay in the test's bucket (they are few)."""

    def read(self, case: str, relative: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=f"{case}/{relative}")
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(response["Body"].read())

    def entries(self, case: str) -> dict[str, str | None]:
        """The digest of each object of ``case/out`` (``md5:`` and its ETag, the MD5 of its
        bytes for an object put in one part), and of each of its "directories" (the sorted
        names and digests of the objects below it)."""
        found: dict[str, str | None] = {}
        below: dict[str, list[str]] = collections.defaultdict(list)
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{case}/out/"):
            for item in page.get("Contents", []):
                relative = item["Key"][len(case) + 1 :]
                parts = relative.split("/")
                digest = "md5:" + str(item["ETag"]).strip('"')
                if len(parts) == 2:
                    found[relative] = digest
                else:
                    below["/".join(parts[:2])].append(f"{'/'.join(parts[2:])}={digest}")
        for directory, items in below.items():
            found[directory] = "dir:" + ";".join(sorted(items))
        return found

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def place_foreign(self, scenario: Scenario, case: str) -> None:
        """A text object and an unknown "directory" named like old snapshots."""
        self.put(f"{case}/out/{scenario.name_at(1)}", FOREIGN_TEXT)
        self.put(f"{case}/out/{scenario.name_at(3)}/notes.txt", FOREIGN_TEXT)


def _threads() -> int:
    """The number of threads of this process (1 without /proc)."""
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/task"))
    return 1


def import_all(modules: Iterable[str]) -> None:
    """Import the modules a child imported, so that the next children need not.

    Raises:
        SetupError: An import started a thread: forking would be unsafe.
    """
    threads = _threads()
    for name in modules:
        if name not in sys.modules and not name.startswith("__"):
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    if _threads() > threads:
        message = f"importing the children's modules started {_threads() - threads} thread(s)"
        raise SetupError(message)


def warm_up(work: str) -> None:
    """Make the children forked from this process cheap: do once here, with torch alone,
    what costs a process seconds the first time (the lazy imports and initializations of an
    optimizer step, ``torch.save``, ``torch.load``, DCP's save and load), on one thread and
    without a process group; then freeze what the garbage collector tracks (a child's
    collections would copy every page). The library is not run here: its writers start
    threads (a lease keeper) that a forked child would lack.

    Raises:
        SetupError: The warm-up left a thread running: forking would be unsafe.
    """
    import torch
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    threads = _threads()
    torch.set_num_threads(1)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(batch_at(0)).pow(2).mean().backward()
    optimizer.step()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    torch.load(buffer, map_location="cpu", weights_only=True)
    directory = os.path.join(work, "warm-up-dcp")
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save(state, checkpoint_id=directory, no_dist=True)
        dcp_load(state, checkpoint_id=directory, no_dist=True)
    shutil.rmtree(directory, ignore_errors=True)
    del model, optimizer, buffer, state
    gc.collect()
    gc.freeze()
    if _threads() > threads:
        message = f"the runner has {_threads()} threads after its warm-up, not {threads}"
        raise SetupError(message)


class SetupError(Exception):
    """The fault-free runs of a scenario failed: nothing to inject faults into."""
