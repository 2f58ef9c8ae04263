"""The README's main job: train a digit classifier with pytorch-pfn-extras.

Trains an MLP on the 1,797 8x8 handwritten digits embedded in ``examples/data`` with the
extensions manager, hyper-parameters from ``examples/config/digits.yaml`` (ppe-config), the data
served by a ``TabularDataset`` (ppe-dataset), and writes to ``--out``:

- ``log``: the LogReport (JSON), with train and validation loss/accuracy per epoch;
- ``loss.png``, ``accuracy.png``: PlotReport figures;
- ``snapshot_iter_<N>``: snapshots; running the script again resumes from the newest one.

Usage: ``python examples/train_digits.py --out result [--config PATH] [--epochs N]``
"""

from __future__ import annotations

import argparse
import gzip
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras.config import Config
from pytorch_pfn_extras.dataset.tabular import from_data
from pytorch_pfn_extras.training import extensions

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


class TorchRNG:
    """The global torch RNG as a manager state object: snapshots save it, so that a resumed run
    shuffles and drops out exactly as an uninterrupted one would."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"cpu": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(state["cpu"])


TYPES = {
    "MLP": mlp,
    "parameters": lambda module: list(module.parameters()),
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
}


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

    x, y = load_digits()
    order = np.random.default_rng(config["/training/seed"]).permutation(len(x))
    n_val = len(x) // 5
    data = from_data((x[order], y[order]))
    train, val = data.slice[n_val:], data.slice[:n_val]
    batch_size = config["/training/batch_size"]
    train_loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True)
    val_x, val_y = (torch.from_numpy(a) for a in val.fetch())

    model = config["/model"]
    ppe.to(model, "cpu")
    optimizer = config["/optimizer"]

    def evaluate(manager: ppe.training.ExtensionsManager) -> None:
        model.eval()
        with torch.no_grad():
            out = model(val_x)
        model.train()
        ppe.reporting.report(
            {
                "val/loss": F.cross_entropy(out, val_y),
                "val/accuracy": (out.argmax(1) == val_y).float().mean(),
            }
        )

    log_trigger = tuple(config["/extensions/log_trigger"])
    manager = ppe.training.ExtensionsManager(
        model,
        optimizer,
        config["/training/epochs"],
        iters_per_epoch=len(train_loader),
        out_dir=args.out,
        state_objects={"rng": TorchRNG()},
    )
    manager.extend(
        evaluate, trigger=log_trigger, priority=ppe.training.PRIORITY_WRITER, name="validation"
    )
    manager.extend(extensions.LogReport(trigger=log_trigger))
    manager.extend(extensions.PlotReport(["train/loss", "val/loss"], "epoch", filename="loss.png"))
    manager.extend(
        extensions.PlotReport(["train/accuracy", "val/accuracy"], "epoch", filename="accuracy.png")
    )
    if not args.quiet:
        manager.extend(
            extensions.PrintReport(
                ["epoch", "iteration", "train/loss", "val/loss", "val/accuracy", "elapsed_time"]
            )
        )
        manager.extend(extensions.ProgressBar(update_interval=10))
    manager.extend(
        extensions.snapshot(n_retains=2, autoload=True),
        trigger=tuple(config["/extensions/snapshot_trigger"]),
    )

    while not manager.stop_trigger:
        for images, labels in train_loader:
            if manager.stop_trigger:  # a run resumed mid-epoch can end mid-epoch
                break
            with manager.run_iteration():
                optimizer.zero_grad()
                out = model(images)
                loss = F.cross_entropy(out, labels)
                ppe.reporting.report(
                    {"train/loss": loss, "train/accuracy": (out.argmax(1) == labels).float().mean()}
                )
                loss.backward()
                optimizer.step()

    accuracy = float(manager.get_extension("LogReport").log[-1]["val/accuracy"])
    print(
        f"validation accuracy: {accuracy:.3f} after {manager.iteration} iterations; output in {args.out}"
    )
    if accuracy < args.min_accuracy:
        print(f"validation accuracy {accuracy:.3f} is below --min-accuracy {args.min_accuracy}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
