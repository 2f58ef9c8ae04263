"""The README's main job: train a digit classifier with pytorch-pfn-extras.

Trains an MLP on the 1,797 8x8 handwritten digits embedded in ``examples/data`` with the
trainer engine (``ppe.engine.create_trainer`` and ``create_evaluator``, ppe-training), its
hyper-parameters and learning-rate schedule from ``examples/config/digits.yaml`` (ppe-config)
and the data served by a ``TabularDataset`` (ppe-dataset). The model returns a dict holding its
``loss``: the default logic backpropagates from it and steps the optimizer; the evaluator reports
the validation loss and, through ``AccuracyMetric``, the accuracy over the whole validation set;
the ``LRScheduler`` extension steps the config's scheduler once an epoch. It writes to ``--out``:

- ``log``: the LogReport (JSON), with ``train/loss``, ``train/accuracy``, ``val/loss``,
  ``val/accuracy``, the learning rate ``lr`` (``observe_lr``) and the ``ParameterStatistics`` of
  every parameter and gradient (``stats/net.0.weight/grad/std``...) per epoch;
- ``loss.png``, ``accuracy.png``: PlotReport figures; ``statistics.png``: the
  VariableStatisticsPlot of the parameters and gradients over the iterations;
- ``snapshot_iter_<N>``: snapshots (the two newest); running the script again resumes from the
  newest one, exactly where the previous run stopped (the trainer's snapshots carry the random
  states, so the resumed run shuffles and drops out as an uninterrupted one would; the
  scheduler and every extension's state are in them too).

At the end it prints the final and the best validation accuracy (``MaxValue``) with its epoch.

Usage: ``python examples/train_digits.py --out result [--config PATH] [--epochs N] [--quiet]
[--min-accuracy A]``; exits with 1 when the final validation accuracy is below ``A`` (0.9).

The same script trains on several processes (data parallel, gloo), started by torchrun or by
OpenMPI's mpirun::

    torchrun --nproc-per-node 2 examples/train_digits.py --out result
    mpirun -n 2 python examples/train_digits.py --out result

Under torchrun (``WORLD_SIZE`` > 1) it calls ``torch.distributed.init_process_group``; under
mpirun (``OMPI_COMM_WORLD_SIZE``) ``ppe.distributed.initialize_ompi_environment`` (rank 0's store
at ``MASTER_ADDR:MASTER_PORT``, localhost:1234 by default). Each rank trains on its share of the
training images (``create_distributed_subset_indices``) with ``batch_size / world size`` images
per iteration, so one iteration still sees ``batch_size`` images; the model is wrapped in
``ppe.nn.parallel.DistributedDataParallel``; each rank evaluates its share of the validation
images (``DistributedValidationSampler``) and the distributed evaluator and ``LogReport`` report
the means over all ranks. Rank 0 writes the outputs and prints; the snapshots are written by rank
0 (``saver_rank``) and loaded by every rank.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pathlib
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras.config import Config
from pytorch_pfn_extras.dataset.tabular import from_data
from pytorch_pfn_extras.distributed import (
    DistributedValidationSampler,
    create_distributed_subset_indices,
    initialize_ompi_environment,
)
from pytorch_pfn_extras.nn.parallel import DistributedDataParallel
from pytorch_pfn_extras.training import extensions
from pytorch_pfn_extras.training.metrics import AccuracyMetric
from pytorch_pfn_extras.training.triggers import ManualScheduleTrigger

HERE = pathlib.Path(__file__).resolve().parent


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return the embedded digits as (float32 images scaled to [0, 1], int64 labels)."""
    with gzip.open(HERE / "data" / "digits.csv.gz", "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return table[:, :-1] / 16.0, table[:, -1].astype(np.int64)


def mlp(in_features: int, hidden: list[int], n_classes: int, dropout: float) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for width in hidden:
        layers += [torch.nn.Linear(in_features, width), torch.nn.ReLU(), torch.nn.Dropout(dropout)]
        in_features = width
    layers.append(torch.nn.Linear(in_features, n_classes))
    return torch.nn.Sequential(*layers)


class Classifier(torch.nn.Module):
    """The config's network as the engine's model: it takes a batch (``x`` images, ``t``
    labels) and returns the ``loss`` to backpropagate from, the batch ``accuracy`` and the
    ``logits``."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        accuracy = (logits.argmax(1) == t).float().mean()
        return {"loss": F.cross_entropy(logits, t), "accuracy": accuracy, "logits": logits}


TYPES: dict[str, Any] = {
    "MLP": mlp,
    "parameters": lambda module: list(module.parameters()),
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
    "CosineAnnealingLR": torch.optim.lr_scheduler.CosineAnnealingLR,
    "StepLR": torch.optim.lr_scheduler.StepLR,
}


def init_distributed() -> tuple[int, int]:
    """Initialize torch.distributed when a launcher started several processes.

    Returns:
        ``(world_size, rank)``: ``(1, 0)`` for a plain ``python`` run.
    """
    if "OMPI_COMM_WORLD_SIZE" in os.environ:  # mpirun
        world_size, rank, _ = initialize_ompi_environment(backend="gloo", init_method="tcp")
        return world_size, rank
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun
        dist.init_process_group("gloo")
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="result", help="output directory (default: result)")
    parser.add_argument("--config", default=str(HERE / "config" / "digits.yaml"))
    parser.add_argument("--epochs", type=int, default=None, help="override training.epochs")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or printed report")
    parser.add_argument("--min-accuracy", type=float, default=0.9, help="exit 1 below this")
    args = parser.parse_args(argv)

    overrides = [("/training/epochs", str(args.epochs))] if args.epochs is not None else []
    config = Config.load_path(args.config, types=TYPES)
    if overrides:
        config.update_via_args(overrides)
    torch.manual_seed(config["/training/seed"])
    torch.set_num_threads(1)  # a tiny model: one thread is fastest (several times on 2 cores)
    world_size, rank = init_distributed()
    distributed = world_size > 1

    x, y = load_digits()
    order = np.random.default_rng(config["/training/seed"]).permutation(len(x))
    n_val = len(x) // 5
    data = from_data({"x": x[order], "t": y[order]})  # batches are dicts: forward(x=..., t=...)
    train, val = data.slice[n_val:], data.slice[:n_val]
    batch_size = config["/training/batch_size"]
    val_sampler = None
    if distributed:
        if batch_size % world_size:
            message = f"batch_size {batch_size} is not divisible by the {world_size} processes"
            raise ValueError(message)
        batch_size //= world_size
        seed = config["/training/seed"]
        train = torch.utils.data.Subset(
            train, create_distributed_subset_indices(len(train), seed=seed)
        )
        val_sampler = DistributedValidationSampler(val, shuffle=False)
    train_loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val, batch_size=256, sampler=val_sampler)

    model = Classifier(config["/model"])  # the optimizer trains the same parameters
    optimizer = config["/optimizer"]
    scheduler = config["/scheduler"]  # steps the same optimizer instance
    # With several processes, the trainer runs the model wrapped in DistributedDataParallel
    # (which averages the gradients over the ranks); the snapshots hold the bare model.
    trained: torch.nn.Module = DistributedDataParallel(model) if distributed else model

    epochs = config["/training/epochs"]
    log_trigger = tuple(config["/extensions/log_trigger"])
    period = config["/extensions/statistics_plot_period"]  # and at the last epoch
    statistics_plot_epochs = sorted({*range(period, epochs, period), epochs})
    evaluator = ppe.engine.create_evaluator(
        trained,
        metrics=[AccuracyMetric(label_key="t", output_key="logits")],  # the "accuracy" output
        options={"eval_report_keys": ["loss", "accuracy"]},  # val/loss, val/accuracy
        distributed=distributed,  # the means over every rank's share of the validation set
    )
    best = extensions.MaxValue("val/accuracy", trigger=log_trigger)
    trainer_extensions: list[ppe.training.extension.ExtensionLike] = [
        extensions.LRScheduler(scheduler, trigger=(1, "epoch")),
        extensions.observe_lr(optimizer, trigger=log_trigger),  # "lr" of the epoch just trained
        extensions.ParameterStatistics(
            model,
            statistics=config["/extensions/parameter_statistics"],
            prefix="stats",
            trigger=log_trigger,
        ),
        best,
        extensions.LogReport(trigger=log_trigger, distributed=distributed),
        extensions.PlotReport(
            ["train/loss", "val/loss"], "epoch", log_trigger, filename="loss.png"
        ),
        extensions.PlotReport(
            ["train/accuracy", "val/accuracy"], "epoch", log_trigger, filename="accuracy.png"
        ),
        extensions.VariableStatisticsPlot(
            model, trigger=ManualScheduleTrigger(statistics_plot_epochs, "epoch")
        ),
    ]
    if not args.quiet and rank == 0:
        columns = ["epoch", "iteration", "lr", "train/loss", "val/loss", "val/accuracy"]
        trainer_extensions += [
            extensions.PrintReport([*columns, "elapsed_time"]),
            extensions.ProgressBar(update_interval=10),
        ]
    trainer = ppe.engine.create_trainer(
        trained,
        optimizer,
        epochs,
        evaluator=(evaluator, log_trigger),
        extensions=trainer_extensions,
        out_dir=args.out,
        options={"backward_outputs": ["loss"], "train_report_keys": ["loss", "accuracy"]},
        transform_model=lambda name, module: model,  # snapshots hold the bare model
    )
    trainer.extend(
        extensions.snapshot(n_retains=2, autoload=True, saver_rank=0 if distributed else None),
        trigger=tuple(config["/extensions/snapshot_trigger"]),
    )

    ppe.to(trained, "cpu")
    trainer.run(train_loader, val_loader)  # resumes from the newest snapshot in --out, if any

    accuracy = float(trainer.manager.get_extension("LogReport").log[-1]["val/accuracy"])
    if rank == 0:
        print(
            f"validation accuracy: {accuracy:.3f} after {trainer.iteration} iterations; "
            f"output in {args.out}"
        )
        print(f"best validation accuracy: {best.best_value:.3f} at epoch {best.best_epoch}")
        if accuracy < args.min_accuracy:
            print(f"validation accuracy {accuracy:.3f} is below --min-accuracy {args.min_accuracy}")
    if distributed:
        dist.destroy_process_group()
    return 1 if accuracy < args.min_accuracy else 0


if __name__ == "__main__":
    sys.exit(main())
