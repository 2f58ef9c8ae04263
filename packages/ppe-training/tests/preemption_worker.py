"""One rank of the preemption tests of test_preemption_signals.py (under torch.distributed.run
through worker_exit.py, or started directly with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT).

``python preemption_worker.py OUT --cases CASES`` first trains without interruption (the
reference), then runs each case of ``CASES`` (comma-separated ``TARGET@ITERATION@RANK``):
a run of 12 iterations (a tiny MLP with Adam and a StepLR state object, gradients averaged
by hand, a SHARDED ``snapshot(autoload=True)`` every 4 iterations, a ``PreemptionHandler``
exchanging after every iteration) in ``OUT/case_<n>``, during whose iteration ITERATION rank
RANK sends SIGTERMs:

- ``burst``: 3 to itself;
- ``all``: 2 to every worker (what Slurm's signal to every process of the step and
  torchrun's forwarded copy make), and, once the run stopped, each worker one more to itself;
- ``agent``: 1 to the torchrun agent (``PPE_TEST_AGENT_PID``) and 1 to every worker at once
  (what a scheduler that signals every process of the job does); the agent forwards its own
  copy whenever it does. It must be the last case: the agent ends the job after it.

Each case then resumes in a second run from the same directory, to the end. Every rank
prints, per case, ``CASE <n> RANK <rank> STOP <iteration> PREEMPTED <bool> BY <rank that
received the signal, from the handler's log> IGNORED <log lines about ignored repeats>
SNAPSHOTS <iterations of the committed snapshots after the first run> EQUAL <the resumed
weights are the reference's>``.

``--exit-in-save`` is the barrier test: rank 1 ends its process (``os._exit(3)``) while
writing the preemption's snapshot of a SIGTERM that rank 0 sends itself in iteration 2;
rank 0 fails at the barrier after the snapshots and prints the error.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras import writing
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module

ITERATIONS = 12
ITERS_PER_EPOCH = 4
ROWS = 4
LOGGER = "pytorch_pfn_extras.training.extensions.preemption"


class Messages(logging.Handler):
    """The preemption logger's messages."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(2000 + iteration)
    x = torch.randn(ROWS, 4, generator=generator)
    return x, x.sum(1, keepdim=True).repeat(1, 4) * 0.5


def new_manager(
    out: Path, *, preempt: bool = False, snapshot: bool = True
) -> tuple[ExtensionsManager, Any]:
    """A fresh model, optimizer and manager; the SHARDED snapshot (``None`` without it)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    manager = ExtensionsManager(
        model,
        optimizer,
        ITERATIONS // ITERS_PER_EPOCH,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=str(out),
        state_objects={"scheduler": scheduler},
    )
    sharded = None
    if snapshot:
        sharded = ext_module.snapshot(snapshot_mode=ext_module.SnapshotMode.SHARDED, autoload=True)
        manager.extend(sharded, trigger=(4, "iteration"))
    if preempt:
        manager.extend(ext_module.PreemptionHandler(check_interval=0))
    return manager, sharded


def train(
    manager: ExtensionsManager, signal_at: int = 0, send: Any = None
) -> dict[str, torch.Tensor]:
    """The training loop; ``send()`` is called in iteration ``signal_at``."""
    model = manager.models["main"]
    optimizer = manager.optimizers["main"]
    scheduler = manager.state_objects["scheduler"]
    rank, world = dist.get_rank(), dist.get_world_size()
    while not manager.stop_trigger:
        x, t = batch(manager.iteration)
        with manager.run_iteration():
            if manager.iteration + 1 == signal_at:
                send()
            loss = torch.nn.functional.mse_loss(model(x[rank::world]), t[rank::world])
            optimizer.zero_grad()
            loss.backward()
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= world
            optimizer.step()
            scheduler.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def wait_until_received(handler: Any, timeout: float = 60.0) -> None:
    """Wait in this iteration until this process has the signal (delivered to itself, it
    has it at once; the wait only guards against a slow delivery)."""
    deadline = time.monotonic() + timeout
    while handler.received is None and time.monotonic() < deadline:
        time.sleep(0.01)


def equal(weights: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> bool:
    return weights.keys() == reference.keys() and all(
        torch.equal(weights[k], reference[k]) for k in reference
    )


def run_case(
    number: int, spec: str, out: Path, pids: list[int], reference: dict[str, torch.Tensor]
) -> None:
    target, at, by = spec.split("@")
    signal_at, signal_rank = int(at), int(by)
    rank = dist.get_rank()
    directory = out / f"case_{number}"
    messages = Messages()
    logging.getLogger(LOGGER).addHandler(messages)
    try:
        manager, _ = new_manager(directory, preempt=True)
        handler = manager.get_extension("PreemptionHandler")

        def send() -> None:
            if target == "burst":
                for _ in range(3):
                    os.kill(os.getpid(), signal.SIGTERM)
            elif target == "all":
                for _ in range(2):
                    for pid in pids:
                        os.kill(pid, signal.SIGTERM)
            else:
                agent = int(os.environ.get("PPE_TEST_AGENT_PID", os.getppid()))
                for pid in [agent, *pids]:
                    os.kill(pid, signal.SIGTERM)
            wait_until_received(handler)

        train(manager, signal_at if rank == signal_rank else 0, send)
        if target == "all":
            os.kill(os.getpid(), signal.SIGTERM)  # a late copy, after the stop
    finally:
        logging.getLogger(LOGGER).removeHandler(messages)
    found = [re.search(r"was received by rank (\d)", m) for m in messages.messages]
    by_rank = ",".join(m.group(1) for m in found if m is not None) or "-"
    ignored = sum("repeated signal(s)" in m for m in messages.messages)
    committed = sorted(
        int(path.name.rsplit("_", 1)[1])
        for path in directory.glob("snapshot_iter_*")
        if (path / "ppe_snapshot.json").exists()
    )
    dist.barrier()
    # Without a handler of its own: a late copy of the signal (the agent's) goes to the
    # preempted run's, which absorbs it.
    resumed, snapshot = new_manager(directory)
    weights = train(resumed)
    same = snapshot.resumed_from is not None and equal(weights, reference)
    say(
        f"CASE {number} RANK {rank} STOP {manager.iteration} PREEMPTED {handler.preempted} "
        f"BY {by_rank} IGNORED {ignored} SNAPSHOTS {','.join(map(str, committed))} "
        f"EQUAL {same}"
    )


def say(line: str) -> None:
    """Print ``line`` in one write: the ranks share the output, unbuffered under torchrun."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ExitingWriter(writing.SimpleWriter):
    """Ends the process when it writes the preemption's snapshot (rank 1 of the barrier test)."""

    def __call__(self, filename: str, out_dir: str, target: Any, **kwargs: Any) -> None:
        os._exit(3)


def exit_in_save(out: Path) -> None:
    rank = dist.get_rank()
    manager, _ = new_manager(out, snapshot=False)
    writer = ExitingWriter() if rank == 1 else None
    manager.extend(ext_module.snapshot(writer=writer, filename=f"rank{rank}_{{.iteration}}"))
    handler = ext_module.PreemptionHandler(check_interval=0)
    manager.extend(handler)
    try:
        train(manager, 2 if rank == 0 else 0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    except RuntimeError as error:
        say(f"RANK {rank} ERROR {error}")
        raise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--cases", default="")
    parser.add_argument("--exit-in-save", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    logging.getLogger(LOGGER).setLevel(logging.INFO)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    out = Path(args.out)
    try:
        if args.exit_in_save:
            exit_in_save(out)
            return
        pids: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(pids, os.getpid())
        reference_manager, _ = new_manager(out / "reference", snapshot=False)
        reference = train(reference_manager)
        for number, spec in enumerate(filter(None, args.cases.split(","))):
            run_case(number, spec, out, pids, reference)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
