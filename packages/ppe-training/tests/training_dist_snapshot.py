"""One rank of the saver_rank tests: ``python training_dist_snapshot.py OUT_DIR RANK WORLD PORT
[on_error]``.

Phase 1 trains 4 iterations with ``snapshot(saver_rank=0)``; after a barrier, phase 2 starts
a new manager with ``autoload=True`` on every rank. Prints ``RESUMED <iteration>``.

With ``on_error``, every rank trains with ``snapshot(saver_rank=0, snapshot_on_error=True)``
whose savefun appends its rank to ``OUT_DIR/writers``, and the third iteration raises on every
rank: only the saver rank writes the snapshot of the failed state. Prints ``FAILED <error>``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.distributed as dist

from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module


def build(out_dir: str, rank: int) -> tuple[ExtensionsManager, torch.nn.Module]:
    torch.manual_seed(rank)  # different weights per rank: loading must overwrite them
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(model, optimizer, 10, iters_per_epoch=2, out_dir=out_dir)
    manager.extend(ext_module.snapshot(saver_rank=0, autoload=True), trigger=(2, "iteration"))
    return manager, model


def on_error(out_dir: str, rank: int) -> None:
    def savefun(target: Any, fileobj: Any, **kwargs: Any) -> None:
        with open(os.path.join(out_dir, "writers"), "a") as f:
            f.write(f"{rank}\n")
        torch.save(target, fileobj)

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    manager = ExtensionsManager(model, optimizer, 10, iters_per_epoch=2, out_dir=out_dir)
    snapshot = ext_module.snapshot(
        savefun, "error_{.iteration}", saver_rank=0, snapshot_on_error=True
    )
    manager.extend(snapshot, trigger=(100, "iteration"))
    try:
        while not manager.stop_trigger:
            with manager.run_iteration():
                if manager.iteration == 2:
                    message = f"diverged on rank {rank}"
                    raise FloatingPointError(message)
                model.weight.data += 1.0
    except FloatingPointError as error:
        print(f"FAILED {error}", flush=True)


def main() -> None:
    out_dir, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    if sys.argv[5:] == ["on_error"]:
        try:
            on_error(out_dir, rank)
            dist.barrier()
        finally:
            dist.destroy_process_group()
        return
    try:
        manager, model = build(out_dir, 0)
        manager.start_extensions()  # finds nothing to load: no rank has written yet
        dist.barrier()
        for _ in range(4):
            with manager.run_iteration():
                model.weight.data += 1.0
        dist.barrier()
        resumed, resumed_model = build(out_dir, rank)
        resumed.start_extensions()
        assert torch.equal(resumed_model.weight, model.weight), (resumed_model.weight, model.weight)
        print(f"RESUMED {resumed.iteration}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
