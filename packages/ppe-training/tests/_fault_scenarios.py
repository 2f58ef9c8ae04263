"""The scenarios of the fault-injection harness, and what one forked child of a case runs.

A scenario is a tiny training (``torch.nn.Linear(2, 2)``, SGD with momentum, 4 iterations an
epoch, a snapshot every 2 iterations with ``autoload=True``): the *setup* trains iterations
1-4 (snapshots at 2 and 4), the *run* (the reference, or a run with a fault) and the *resume*
train on to iteration 6 (a snapshot at 6) from what is on disk. A child reports through its
events file (``_fault_ops.Events``): the operations (the reference run), the fault, each
commit, where autoload started, the weights after each iteration, the error raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import os
import re
import sys
import traceback
import warnings
from typing import Any

import _fault_ops as ops

ITERS_PER_EPOCH = 4
END = 6  # the last iteration
SETUP_STOP = 4  # the setup trains this far
EVERY = 2  # a snapshot every 2 iterations
GROUP_TIMEOUT = 60.0  # the process group's (the harness stops a rank that waits for a dead one)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One training set-up whose every operation is failed in turn.

    Attributes:
        name: The test's name for it (one word).
        title: What it covers, for the summary and the docs.
        mode: The ``SnapshotMode``.
        filename: The snapshot filename template.
        n_retains: ``snapshot(n_retains=...)``.
        ranks: Processes (2: a gloo process group over a ``FileStore``).
        async_save: ``snapshot(async_save=True)`` (SHARDED).
        objects: ``snapshot_object({"model": ..., "optimizer": ...})`` instead of the
            manager's snapshot: it starts from scratch (no setup), and its resume only loads.
        log: LogReport's filename (``log.jsonl``: appended; else the JSON log, rewritten).
        foreign: Put foreign entries named like old snapshots in the output directory.
        s3: Through pfio on the local S3 server instead of the local disk.
        budget: At most this many operations of each rank are faulted (a deterministic
            sample beyond: ``_fault_checks.select_operations``); ``None``: all of them.
    """

    name: str
    title: str
    mode: str = "DEFAULT"
    filename: str = "snapshot_iter_{.iteration}"
    n_retains: int = -1
    ranks: int = 1
    async_save: bool = False
    objects: bool = False
    log: str | None = None
    foreign: bool = False
    s3: bool = False
    budget: int | None = None

    @property
    def setup_stop(self) -> int:
        """The iteration the base directory holds snapshots up to."""
        return 0 if self.objects else SETUP_STOP

    def name_at(self, iteration: int) -> str:
        """The snapshot name written at ``iteration``."""
        return self.filename.replace("{.iteration}", str(iteration)).replace(
            "{.epoch}", str(iteration // ITERS_PER_EPOCH)
        )

    def is_snapshot(self, relative: str) -> bool:
        """Whether ``relative`` (to the case) is a snapshot's final path."""
        head, name = os.path.split(relative)
        if head != "out":
            return False
        pattern = re.escape(self.filename).replace(r"\{\.iteration\}", r"[0-9]+")
        pattern = pattern.replace(r"\{\.epoch\}", r"[0-9]+")
        return re.fullmatch(pattern, name) is not None

    def saves(self, start: int, stop: int) -> list[int]:
        """The iterations a run from ``start`` to ``stop`` saves at."""
        return [i for i in range(start + 1, stop + 1) if i % EVERY == 0]


SCENARIOS = {
    scenario.name: scenario
    for scenario in [
        Scenario(
            "default",
            "DEFAULT, n_retains=2, foreign entries named like old snapshots",
            n_retains=2,
            foreign=True,
            budget=18,
        ),
        Scenario(
            "default_rewrite",
            "DEFAULT, one name saved twice an epoch (snapshot_epoch_{.epoch})",
            filename="snapshot_epoch_{.epoch}",
            budget=14,
        ),
        Scenario(
            "sharded_rewrite",
            "SHARDED, one name saved twice an epoch (snapshot_epoch_{.epoch})",
            mode="SHARDED",
            filename="snapshot_epoch_{.epoch}",
            budget=18,
        ),
        Scenario(
            "sharded_retention",
            "SHARDED on the local disk, n_retains=2, foreign entries",
            mode="SHARDED",
            n_retains=2,
            foreign=True,
            budget=12,
        ),
        Scenario(
            "sharded_async",
            "SHARDED, async_save=True",
            mode="SHARDED",
            async_save=True,
            budget=12,
        ),
        Scenario(
            "distributed_2_ranks",
            "DISTRIBUTED on 2 gloo ranks (faults on either rank)",
            mode="DISTRIBUTED",
            ranks=2,
            budget=4,
        ),
        Scenario(
            "sharded_2_ranks",
            "SHARDED on 2 gloo ranks (faults on either rank)",
            mode="SHARDED",
            ranks=2,
            budget=4,
        ),
        Scenario(
            "snapshot_object",
            "snapshot_object of a model and its optimizer, n_retains=2",
            filename="model_iter_{.iteration}",
            n_retains=2,
            objects=True,
            budget=12,
        ),
        Scenario(
            "log_append",
            "LogReport appending log.jsonl, with DEFAULT snapshots",
            log="log.jsonl",
            budget=12,
        ),
        Scenario(
            "log_rewrite",
            "LogReport rewriting the JSON log, with DEFAULT snapshots",
            log="log",
            budget=12,
        ),
        Scenario(
            "default_s3",
            "DEFAULT through pfio on the S3 server, n_retains=2, foreign objects",
            n_retains=2,
            foreign=True,
            s3=True,
            budget=8,
        ),
    ]
}


@dataclasses.dataclass(frozen=True)
class Child:
    """What one forked child runs.

    Attributes:
        phase: ``"setup"`` (to iteration 4), ``"run"`` (the reference or a faulted run, to
            the end) or ``"resume"`` (the run again, without faults).
        case: The case directory (local), or the case's key prefix (S3).
        events: The events file.
        fault: The fault to inject, or ``None``.
        rank: The rank (0 without a process group).
        store: The ``FileStore`` of the process group (2 ranks).
    """

    phase: str
    case: str
    events: str
    fault: Any = None
    rank: int = 0
    store: str = ""

    @property
    def reports_ops(self) -> bool:
        """Whether the child reports every operation (the reference run does)."""
        return self.phase == "run" and self.fault is None


def _params(model: Any) -> list[float]:
    return [float(v) for p in model.parameters() for v in p.detach().flatten().tolist()]


def make_model() -> Any:
    import torch

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():  # not torch.manual_seed: its lazy CUDA call formats a stack trace
        model.weight.copy_(torch.tensor([[0.5, -0.3], [0.2, 0.4]]))
        model.bias.copy_(torch.tensor([0.1, -0.2]))
    return model


def batch_at(iteration: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed(100 + iteration)
    return torch.randn(3, 2, generator=generator)


def _describe(error: BaseException) -> dict[str, str]:
    text = "".join(traceback.format_exception(error))
    chain: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(chain) < 6:
        chain.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return {"type": type(error).__name__, "chain": "\n".join(chain), "traceback": text[-4000:]}


def run_child(scenario: Scenario, child: Child, context: dict[str, Any]) -> int:
    """The body of a forked child: the scenario's training for ``child.phase``, reported to
    ``child.events``. Returns the exit status."""
    events = ops.Events(child.events)

    def warn(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        events.emit("warning", f"{category.__name__}: {message}")

    warnings.simplefilter("always")
    warnings.showwarning = warn
    try:
        import torch

        torch.set_num_threads(1)
        if scenario.ranks > 1:
            import torch.distributed as dist

            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            store = dist.FileStore(child.store, scenario.ranks)  # type: ignore[attr-defined]
            dist.init_process_group(
                "gloo",
                store=store,
                rank=child.rank,
                world_size=scenario.ranks,
                timeout=datetime.timedelta(seconds=GROUP_TIMEOUT),
            )
        counter, interposer, writer, out = _file_system(scenario, child, context, events)
        with interposer:
            _train(scenario, child, out, writer, events, counter)
    except BaseException as error:
        events.emit("raised", _describe(error))
        return 1
    finally:
        events.emit("modules", sorted(sys.modules))
        events.flush()
    return 0


def _file_system(
    scenario: Scenario, child: Child, context: dict[str, Any], events: Any
) -> tuple[Any, Any, Any, str]:
    """The child's counter, what installs it (a context manager), its writer, its out_dir."""
    if not scenario.s3:
        out = os.path.join(child.case, "out")

        def digest(relative: str) -> str | None:
            found: str | None = ops.local_digest(os.path.join(child.case, relative))
            return found

        counter = ops.Counter(
            events, child.fault, scenario.is_snapshot, digest, report_ops=child.reports_ops
        )
        return counter, ops.OsInterposer(child.case, counter), None, out
    import pfio  # type: ignore[import-untyped]

    from pytorch_pfn_extras import writing

    os.environ.update(context["env"])
    bucket = context["bucket"]
    inner = writing.PfioFileSystem(pfio.v2.from_url(f"s3://{bucket}", endpoint=context["endpoint"]))
    prefix = child.case

    def s3_digest(relative: str) -> str | None:
        try:
            with inner.open(f"{prefix}/{relative}", "rb") as f:
                return "md5:" + hashlib.md5(f.read()).hexdigest()
        except FileNotFoundError:
            return None

    counter = ops.Counter(
        events, child.fault, scenario.is_snapshot, s3_digest, report_ops=child.reports_ops
    )
    fs = ops.CountingFileSystem(inner, counter, prefix, f"s3://{bucket}")
    return counter, contextlib.nullcontext(), writing.SimpleWriter(fs=fs), f"{prefix}/out"


def _train(
    scenario: Scenario, child: Child, out: str, writer: Any, events: Any, counter: Any
) -> None:
    import torch

    from pytorch_pfn_extras import reporting
    from pytorch_pfn_extras.training import ExtensionsManager, extensions

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = ExtensionsManager(
        model,
        optimizer,
        2,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=out,
        writer=writer,
        stop_trigger=(END, "iteration"),
    )
    if scenario.log is not None:
        log_report = extensions.LogReport(
            filename=scenario.log,
            append=scenario.log.endswith(".jsonl"),
            trigger=(1, "iteration"),
        )
        manager.extend(log_report)
    options: dict[str, Any] = {
        "n_retains": scenario.n_retains,
        "autoload": True,
        "snapshot_mode": extensions.SnapshotMode[scenario.mode],
    }
    if scenario.async_save:
        options["async_save"] = True
    if scenario.objects:
        target = {"model": model, "optimizer": optimizer}
        snapshot = extensions.snapshot_object(target, scenario.filename, **options)
    else:
        snapshot = extensions.snapshot(filename=scenario.filename, **options)
    manager.extend(snapshot, trigger=(EVERY, "iteration"))
    manager.start_extensions()
    events.emit("started", manager.iteration, _params(model), counter.count)
    stop = SETUP_STOP if child.phase == "setup" else END
    if child.phase == "resume" and scenario.objects:
        manager.finalize()  # snapshot_object does not resume the manager: loading is all
        return
    while not manager.stop_trigger:
        if manager.iteration >= stop:
            manager.finalize()
            break
        with manager.run_iteration():
            x = batch_at(manager.iteration)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            reporting.report({"loss": loss.item()})
        events.emit("iteration", manager.iteration, _params(model))
    events.emit("finished", manager.iteration, _params(model))
