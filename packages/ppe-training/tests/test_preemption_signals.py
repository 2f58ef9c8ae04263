"""PreemptionHandler on 2 ranks under ``python -m torch.distributed.run`` (gloo, 127.0.0.1),
with the signals a cluster really sends: every worker gets SIGTERM more than once (Slurm
signals every process of the job, torchrun forwards its own copy), or a burst of them, at
seeded random iterations including the last ones. Every worker exits 0, the ranks stop once,
at the same iteration, with one committed snapshot there, and resume to the weights of a run
that was never stopped. Also: a barrier that fails because a rank died says so, not that it
waited its timeout.

Each job runs preemption_worker.py (its docstring says what a case does) through
worker_exit.py, which records each worker's exit code. The random iterations come from a
seed that each test prints; ``PPE_TEST_SEED=<seed>`` replays that run."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("preemption_worker.py")
WRAPPER = Path(__file__).with_name("worker_exit.py")
ITERATIONS = 12  # of each run of preemption_worker.py
TIMEOUT = 240

pytestmark = pytest.mark.slow


_CASE = re.compile(
    r"CASE (\d) RANK (\d) STOP (\d+) PREEMPTED (True|False) BY ([\d,-]+) IGNORED (\d+) "
    r"SNAPSHOTS ([\d,]+) EQUAL (True|False)"
)


@pytest.mark.parametrize("agent_window", [(2, 7), (ITERATIONS - 4, ITERATIONS)])
def test_repeated_sigterms_on_two_ranks_stop_them_once_with_one_snapshot_and_exit_0(
    seed: int,
    tmp_path: Path,
    agent_window: tuple[int, int],
    torchrun: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    rng = random.Random(seed)
    # (target, iteration, rank): a burst of 3 to one worker anywhere; 2 to every worker in
    # the last 5 iterations; then 1 to the agent and 1 to every worker at once, which ends
    # the job once the workers exit (the agent forwards its own copy to each of them).
    cases = [
        ("burst", rng.randint(2, ITERATIONS), rng.randrange(2)),
        ("all", rng.randint(ITERATIONS - 4, ITERATIONS), rng.randrange(2)),
        ("agent", rng.randint(*agent_window), rng.randrange(2)),
    ]
    records = tmp_path / "exits"
    records.mkdir()
    process = torchrun(
        2,
        sys.executable,  # with --no-python: the program each worker runs
        str(WRAPPER),
        str(records),
        sys.executable,
        str(WORKER),
        str(tmp_path / "out"),
        "--cases",
        ",".join(f"{target}@{at}@{rank}" for target, at, rank in cases),
        launcher=["--standalone", "--max-restarts", "0", "--no-python"],
        timeout=TIMEOUT,
    )
    context = f"seed {seed}, cases {cases}:\n{process.stdout}\n{process.stderr[-6000:]}"
    exits = []
    for rank in (0, 1):
        record = records / f"exit_{rank}"
        assert record.exists(), f"worker {rank} did not end through worker_exit.py; {context}"
        exits.append(int(record.read_text().split("\n", 1)[0]))
    assert exits == [0, 0], context
    assert "Received 15 death signal, shutting down workers" in process.stderr, context
    found = {(int(m[0]), int(m[1])): m[2:] for m in _CASE.findall(process.stdout)}
    assert set(found) == {(n, rank) for n in range(len(cases)) for rank in (0, 1)}, context
    for number, (target, at, signal_rank) in enumerate(cases):
        reports = [found[number, rank] for rank in (0, 1)]
        where = f"case {number} ({target} in iteration {at} by rank {signal_rank}); {context}"
        assert reports[0][0] == reports[1][0], where  # the same iteration
        for stop, preempted, _, ignored, snapshots, same in reports:
            # The rank that sent has the signal in iteration `at`: the exchange started after
            # it is read after the next iteration, or, after the last, when training ends.
            # Another rank that got it before it ended iteration `at - 1` stops at `at`.
            latest = min(at + 1, ITERATIONS)
            assert int(stop) == latest if target == "burst" else at <= int(stop) <= latest, where
            assert preempted == "True", where
            assert int(ignored) <= 1, where  # at most one line about repeats
            # The periodic snapshots (every 4 iterations) and one where the run stopped.
            expected = sorted({*range(4, int(stop) + 1, 4), int(stop)})
            assert snapshots == ",".join(map(str, expected)), where
            assert same == "True", where  # the resumed run ends with the reference weights
        # Both ranks name the same rank that received it: the one that sent a burst to itself.
        assert reports[0][2] == reports[1][2] and reports[0][2] in ("0", "1"), where
        if target == "burst":
            assert reports[0][2] == str(signal_rank), where
            assert reports[signal_rank][3] == "1", where  # the 2 repeats, in one line


def test_a_barrier_that_fails_at_once_does_not_say_that_it_waited_its_timeout(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    # Rank 1 dies while it writes the preemption's snapshot; rank 0 reaches the barrier
    # after the snapshots, which fails at once (the connection is closed), well before the
    # 30 s timeout of the group.
    environment = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    command = [sys.executable, str(WORKER), str(tmp_path), "--exit-in-save", "--timeout", "30"]
    ranks = [
        subprocess.Popen(
            command,
            env={**environment, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [rank.communicate(timeout=TIMEOUT) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.send_signal(signal.SIGKILL)
                rank.wait()
    context = "\n".join(f"rank {n}: {out}\n{err[-3000:]}" for n, (out, err) in enumerate(outputs))
    assert [rank.returncode for rank in ranks] == [1, 3], context
    error = outputs[0][0]
    assert "not every rank of 2 reached the end of the preemption snapshots (the barrier " in (
        error
    ), context
    assert "before its 30 s timeout" in error, context
    assert "within 30 s" not in error, context
