"""A trainer job for the exact mid-epoch resume test (run as a script).

Usage: ``python engine_resume_run.py OUT_DIR [KILL_AT]``: trains a dropout MLP with a shuffling
DataLoader (random augmentation in the dataset, NumPy and Python randomness too) through
``create_trainer`` with an evaluator and snapshots every 3 iterations (autoload). With
``KILL_AT`` the process SIGKILLs itself at the end of that iteration (after the snapshots of
the iteration, if any). At the end, the model's weights go to ``OUT_DIR/final.pt``.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
from pytorch_pfn_extras.training import extensions


class Noisy(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Random augmentation from torch, NumPy and Python's random module."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.t = (self.x.sum(1) > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        noise = 0.1 * torch.randn(4) + float(np.random.normal(0, 0.01)) + random.gauss(0, 0.01)
        return {"x": self.x[i] + noise, "t": self.t[i]}


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(x)
        return {"loss": F.cross_entropy(y, t), "y": y}


def main(out_dir: str, kill_at: int | None) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def kill(manager: Any) -> None:
        if manager.iteration == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    trainer = ppe.engine.create_trainer(
        model,
        optimizer,
        3,
        out_dir=out_dir,
        evaluator=ppe.engine.create_evaluator(
            model, metrics=[ppe.training.AccuracyMetric("t", "y")]
        ),
        extensions=[extensions.LogReport(filename="log.jsonl")],
        options={"train_report_keys": ["loss"]},
    )
    trainer.extend(extensions.snapshot(autoload=True), trigger=(3, "iteration"))
    trainer.extend(kill, trigger=(1, "iteration"), priority=-1000)  # after the snapshot
    ppe.runtime.to(model, "cpu")
    train = torch.utils.data.DataLoader(Noisy(30), batch_size=4, shuffle=True)  # 8 per epoch
    val = torch.utils.data.DataLoader(Noisy(10), batch_size=4)
    trainer.run(train, val)
    torch.save(model.state_dict(), os.path.join(out_dir, "final.pt"))
    print("ITERATION", trainer.iteration)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
