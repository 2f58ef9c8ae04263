"""A small deterministic training job for the exact-resume tests (run as a script or imported).

Usage: ``python training_resume_run.py OUT_DIR [KILL_AT]``. With ``KILL_AT``, the process
SIGKILLs itself in the middle of the iteration after ``KILL_AT`` (after the optimizer step).
Snapshots are taken every 2 iterations and ``log.jsonl`` gets an entry every 3, so a
kill can leave log entries written after the last snapshot. Without it, training runs
to the end and the final state is saved to ``OUT_DIR/final.pt``. It prints
``ITERATIONS <n>``: the iterations this process ran.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import Extension, ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.training.triggers import EarlyStoppingTrigger, MinValueTrigger

ITERS_PER_EPOCH = 4


class BestLossIterations(Extension):
    """Remembers the iterations at which the epoch loss was the best (a stateful extension)."""

    def __init__(self) -> None:
        self.iterations: list[int] = []

    def __call__(self, manager: Any) -> None:
        self.iterations.append(manager.iteration)

    def state_dict(self) -> dict[str, Any]:
        return {"iterations": list(self.iterations)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iterations = list(state["iterations"])


def batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(iteration)
    x = torch.randn(16, 4, generator=generator)
    return x, x.sum(1, keepdim=True) + 0.1 * torch.randn(16, 1, generator=generator)


def build(out_dir: str) -> tuple[ExtensionsManager, torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
    # Per-epoch means of "val/score": 2, 1, 0, 1, 2 -> stops after epoch 5 (patience 2).
    stop = EarlyStoppingTrigger(monitor="val/score", patience=2, max_trigger=(8, "epoch"))
    manager = ExtensionsManager(
        model,
        optimizer,
        8,
        iters_per_epoch=ITERS_PER_EPOCH,
        out_dir=out_dir,
        stop_trigger=stop,
        state_objects={"scheduler": scheduler},
    )
    manager.extend(ext_module.LogReport())
    manager.extend(
        ext_module.LogReport(filename="log.jsonl", append=True, trigger=(3, "iteration")),
        name="jsonl",
    )
    manager.extend(lambda m: scheduler.step(), name="lr_step", trigger=(1, "epoch"))
    manager.extend(BestLossIterations(), trigger=MinValueTrigger("train/loss", (1, "epoch")))
    manager.extend(ext_module.snapshot(n_retains=2, autoload=True), trigger=(2, "iteration"))
    return manager, model, optimizer, scheduler


def train(out_dir: str, kill_at: int | None = None, abandon_at: int | None = None) -> int:
    """Train; return the number of iterations this call ran.

    ``abandon_at`` stops (without finalizing, like a crash between iterations) once the
    manager reached that iteration; ``kill_at`` SIGKILLs the process during the next one.
    """
    torch.set_num_threads(1)
    manager, model, optimizer, _ = build(out_dir)
    done = 0
    while not manager.stop_trigger:
        if abandon_at is not None and manager.iteration >= abandon_at:
            return done
        with manager.run_iteration():
            x, t = batch(manager.iteration)
            loss = torch.nn.functional.mse_loss(model(x), t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch = manager.iteration // ITERS_PER_EPOCH
            reporting.report(
                {
                    "train/loss": loss.item(),
                    "val/score": abs(epoch - 2) + 0.01 * (manager.iteration % ITERS_PER_EPOCH),
                }
            )
            if manager.iteration == kill_at:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
        done += 1
    torch.save(manager.state_dict(), os.path.join(out_dir, "final.pt"))
    return done


if __name__ == "__main__":
    out = sys.argv[1]
    kill = int(sys.argv[2]) if len(sys.argv) > 2 else None
    print(f"ITERATIONS {train(out, kill_at=kill)}", flush=True)
