"""The reporting extensions of a job of several processes write their files from rank 0.

Every rank of a 2-rank torchrun job (gloo) adds LogReport and PlotReport (and ProfileReport,
VariableStatisticsPlot and TimelineTrace) with one ``out_dir``, as PPE code does. The module
is also the job's script: :func:`worker` trains six times on every rank, each time into a
fresh ``out_dir`` shared by the ranks, and saves what each rank kept in memory to
``OUT/rank<r>.pkl``:

- ``together0`` to ``together3``: the ranks train side by side, with
  ``LogReport(distributed=True)`` (the extensions of ``together0`` are built before the process
  group exists);
- ``in_turn``: each rank logs its own values, and in every iteration rank 0 runs the
  extensions before rank 1 does (so a rank 1 that writes, writes last);
- ``per_rank``: as ``in_turn``, with ``per_rank=True``: one file per rank.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from pytorch_pfn_extras import profiler, reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions

ITERATIONS = 6  # 2 an epoch, an entry each iteration, a plot each epoch
TOGETHER = [f"together{run}" for run in range(4)]
PLOTS = {"plot.png", "statistics.png"}


def _loss(rank: int, iteration: int) -> float:
    return 10.0 * rank + iteration


class _Run:
    """The extensions of one training of one rank, all writing into ``out``."""

    def __init__(self, out: Path, *, distributed: bool, every: bool, per_rank: bool) -> None:
        self.out, self.per_rank = out, per_rank
        self.log = extensions.LogReport(
            trigger=(1, "iteration"), distributed=distributed, per_rank=per_rank
        )
        self.plot = extensions.PlotReport("loss", background=False, per_rank=per_rank)
        self.extra: list[Any] = []
        if every:  # the other extensions that write files
            self.extra = [
                extensions.ProfileReport(filename="profile.jsonl", per_rank=per_rank),
                extensions.VariableStatisticsPlot(
                    torch.nn.Linear(2, 1), report_grad=False, background=False, per_rank=per_rank
                ),
                extensions.TimelineTrace(per_rank=per_rank),
            ]

    def train(self, rank: int, in_turn: bool) -> dict[str, Any]:
        profiler.clear_tracer()
        manager = ExtensionsManager(
            {}, {}, ITERATIONS // 2, iters_per_epoch=2, out_dir=str(self.out), enable_trace=True
        )
        for extension in (self.log, self.plot, *self.extra):
            manager.extend(extension)
        for iteration in range(1, ITERATIONS + 1):

            def step(iteration: int = iteration) -> None:
                with manager.run_iteration():
                    reporting.report({"loss": _loss(rank, iteration)})

            if in_turn:
                for turn in range(dist.get_world_size()):
                    if turn == rank:
                        step()
                    dist.barrier()
            else:
                step()
        return {
            "log": self.log.log,
            "plot": self.plot.data,
            # The image rank 0 writes (and each rank, per_rank): drawn again from the points.
            "rendered": self.plot.render() if rank == 0 or self.per_rank else None,
            "observation": dict(manager.observation),
            "pid": os.getpid(),
        }


def worker(out_dir: str) -> None:
    """Run the trainings of one rank (under torchrun) and save what it kept in memory."""
    out = Path(out_dir)
    together = [
        _Run(out / name, distributed=True, every=False, per_rank=False) for name in TOGETHER
    ]
    dist.init_process_group("gloo")  # after the extensions were made
    rank = dist.get_rank()
    try:
        results: dict[str, dict[str, Any]] = {}
        for name, run in zip(TOGETHER, together):
            results[name] = run.train(rank, in_turn=False)
        for name, per_rank in (("in_turn", False), ("per_rank", True)):
            run = _Run(out / name, distributed=False, every=True, per_rank=per_rank)
            results[name] = run.train(rank, in_turn=True)
        with open(out / f"rank{rank}.pkl", "wb") as f:
            pickle.dump(results, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------ the job


@pytest.fixture(scope="module")
def job(
    tmp_path_factory: pytest.TempPathFactory,
    torchrun: Callable[..., subprocess.CompletedProcess[str]],
) -> tuple[Path, list[dict[str, dict[str, Any]]]]:
    out = tmp_path_factory.mktemp("shared_out")
    result = torchrun(2, __file__, str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = []
    for rank in range(2):
        with open(out / f"rank{rank}.pkl", "rb") as f:
            ranks.append(pickle.load(f))
    return out, ranks


Job = tuple[Path, list[dict[str, dict[str, Any]]]]


def _without_time(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k != "elapsed_time"} for entry in log]


@pytest.mark.parametrize("run", [*TOGETHER, "in_turn"])
def test_ranks_sharing_an_out_dir_leave_rank_0s_files_alone(job: Job, run: str) -> None:
    out, ranks = job
    written = {"log", "plot.png"}
    if run == "in_turn":
        written |= {"profile.jsonl", "statistics.png", "chrome_trace.json"}
    assert set(os.listdir(out / run)) == written
    log = ranks[0][run]["log"]
    assert [entry["iteration"] for entry in log] == list(range(1, ITERATIONS + 1))
    assert json.loads((out / run / "log").read_text()) == log  # valid, each entry once
    assert (out / run / "plot.png").read_bytes() == ranks[0][run]["rendered"]


@pytest.mark.parametrize("run", TOGETHER)
def test_every_rank_keeps_the_distributed_log_in_memory(job: Job, run: str) -> None:
    _, ranks = job
    logs = [_without_time(result[run]["log"]) for result in ranks]
    assert logs[1] == logs[0]
    # The mean of both ranks' losses over each one-iteration interval.
    assert [entry["loss"] for entry in logs[1]] == [i + 5.0 for i in range(1, ITERATIONS + 1)]
    for rank, result in enumerate(ranks):
        assert result[run]["observation"] == {"loss": _loss(rank, ITERATIONS)}


@pytest.mark.parametrize("run", ["in_turn", "per_rank"])
def test_every_rank_keeps_its_own_results_in_memory(job: Job, run: str) -> None:
    _, ranks = job
    for rank, result in enumerate(ranks):
        losses = [_loss(rank, i) for i in range(1, ITERATIONS + 1)]
        assert [entry["loss"] for entry in result[run]["log"]] == losses
        # The epoch means, plotted against the iteration.
        assert result[run]["plot"] == {
            "loss": [(2.0, losses[0] + 0.5), (4.0, losses[2] + 0.5), (6.0, losses[4] + 0.5)]
        }


def test_only_rank_0_writes_the_trace(job: Job) -> None:
    out, ranks = job
    events = profiler.load_chrome_trace_as_json(out / "in_turn" / "chrome_trace.json")
    assert json.loads((out / "in_turn" / "chrome_trace.json").read_text()) == events
    assert {event["pid"] for event in events} == {ranks[0]["in_turn"]["pid"]}


def test_per_rank_writes_one_file_for_each_rank(job: Job) -> None:
    out, ranks = job
    names = ("log", "plot.png", "profile.jsonl", "statistics.png", "chrome_trace.json")
    expected = set()
    for rank, result in enumerate(ranks):
        stems = [os.path.splitext(name) for name in names]
        expected |= {f"{stem}.rank{rank}{suffix}" for stem, suffix in stems}
        folder = out / "per_rank"
        assert json.loads((folder / f"log.rank{rank}").read_text()) == result["per_rank"]["log"]
        assert (folder / f"plot.rank{rank}.png").read_bytes() == result["per_rank"]["rendered"]
        profile = extensions.LogReport.read(folder / f"profile.rank{rank}.jsonl")
        assert [entry["iteration"] for entry in profile] == [2, 4, 6]
        trace = json.loads((folder / f"chrome_trace.rank{rank}.json").read_text())
        assert {event["pid"] for event in trace} == {result["per_rank"]["pid"]}
    assert set(os.listdir(out / "per_rank")) == expected


# ------------------------------------------------------------------------ one process


def _train_alone(out: Path, per_rank: bool) -> list[Any]:
    made = [
        extensions.LogReport(per_rank=per_rank),
        extensions.PlotReport("loss", background=False, per_rank=per_rank),
        extensions.ProfileReport(filename="profile.jsonl", per_rank=per_rank),
        extensions.TimelineTrace(per_rank=per_rank),
    ]
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=str(out))
    for extension in made:
        manager.extend(extension)
    for iteration in range(2):
        with manager.run_iteration():
            reporting.report({"loss": float(iteration)})
    return made


@pytest.mark.parametrize("per_rank", [False, True])
def test_without_a_process_group_the_files_keep_their_names(tmp_path: Path, per_rank: bool) -> None:
    log = _train_alone(tmp_path, per_rank)[0]
    assert set(os.listdir(tmp_path)) == {"log", "plot.png", "profile.jsonl", "chrome_trace.json"}
    assert json.loads((tmp_path / "log").read_text()) == log.log


def test_a_group_of_one_process_writes_under_the_plain_names(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        _train_alone(tmp_path, per_rank=True)
    finally:
        dist.destroy_process_group()
    assert set(os.listdir(tmp_path)) == {"log", "plot.png", "profile.jsonl", "chrome_trace.json"}


@pytest.mark.parametrize(
    ("make", "value"),
    [
        (extensions.LogReport, 1),
        (lambda **kwargs: extensions.PlotReport("loss", **kwargs), "yes"),
        (lambda **kwargs: extensions.VariableStatisticsPlot(torch.nn.Linear(1, 1), **kwargs), None),
        (extensions.ProfileReport, 0),
        (extensions.TimelineTrace, "no"),
    ],
    ids=["LogReport", "PlotReport", "VariableStatisticsPlot", "ProfileReport", "TimelineTrace"],
)
def test_per_rank_must_be_a_bool(make: Callable[..., Any], value: Any) -> None:
    with pytest.raises(TypeError, match=f"per_rank must be a bool, got {value!r}"):
        make(per_rank=value)


if __name__ == "__main__":
    worker(sys.argv[1])
