"""Per-iteration overhead of ``ExtensionsManager.run_iteration()`` and of ``create_trainer``.

Four measurements:

1. A tiny MLP (batch 16, 32 features) trained by a hand-written loop, and by the same loop
   inside ``manager.run_iteration()`` with LogReport, ProgressBar and PrintReport (printing
   to a null stream) and a tensor-valued ``ppe.reporting.report`` each iteration: the
   overhead in microseconds per iteration and the ratio of the two loops.
2. ``run_iteration()`` with an empty body (reporting a 0-d tensor) and the same three
   extensions, against an empty Python loop: the manager's own cost per iteration
   (target: under 15 us; the published PPE takes about 58 us).
3. The same MLP, wrapped in a module whose ``forward(x, t)`` returns ``{"loss": mse}``, trained
   on ``--iters-per-epoch`` pre-made batches by a hand-written loop, by
   ``ppe.engine.create_trainer`` with the same three extensions, and by pytorch-ignite's
   ``create_supervised_trainer`` (needs pytorch-ignite): the overhead of each engine over the
   hand-written loop. ``create_trainer`` gets no options (nothing is reported per iteration;
   LogReport logs the epoch and iteration); ignite's default ``output_transform`` calls
   ``loss.item()`` each iteration. Reference figures on the 2-core development machine: the published PPE's trainer adds
   about 200 us per iteration, pytorch-ignite about 70 us, Lightning about 1,100 us. Target for
   ours: below ignite's overhead, about 30% of PPE's (~60 us).
4. The empty ``run_iteration()`` of 2., with ``extensions.ParameterStatistics(model)`` and
   ``extensions.PlotReport(["value", <a gradient's mean>], "epoch", filename=...)`` added,
   both on ``(1, "epoch")`` triggers, ``--iters-per-epoch`` iterations an epoch; the model,
   a small MLP (32-64-1, four parameters) with gradients from one backward pass, is
   registered with the manager, and PlotReport writes into a temporary directory. The cost
   is split into the per-iteration part (ParameterStatistics accumulates the interval's
   mean of every statistic on the device each iteration; PlotReport sums the observation)
   and the epoch-end part (LogReport and PrintReport with the statistics' keys, the report
   of the means, the plot's data sent to the plot worker), amortized over the epoch; the
   PNG, drawn by the plot worker process on the other core, is written at a later
   iteration, inside the timings. ParameterStatistics' and PlotReport's shares are the
   differences between managers with the three extensions, with PlotReport added, and with
   both added (target for the five: under 50 us per iteration, amortized). The worker's CPU
   time per plot is printed too (on Linux): the work moved off the training path.

Each repetition trains ``--iterations`` iterations both ways, interleaved one epoch at a time
(bare epoch, managed epoch, managed epoch, bare epoch, ...), so that every managed epoch
includes its log write and table row, and a slow drift of the machine's load affects both
sides alike. The figures are medians over all epochs of all repetitions; the overhead is the
median of the paired differences.

The engines are interleaved more finely, as a shared 2-core machine needs: each round runs one
epoch (one ``run()`` of a freshly made engine, whose making is not timed) of ``create_trainer``
and of ignite, in alternating order, over a loader that runs the hand-written loop on each
chunk of ``--chunk`` batches before handing the chunk to the engine. An engine's time is its
``run()`` less the hand-written loop's, and its overhead in a round the difference of the two;
the figures are medians over the rounds, with the quartiles of the overhead.

With ``--device cuda`` the managed loops run under ``torch.cuda.set_sync_debug_mode("warn")``:
a device synchronization inside an iteration (other than LogReport's once per epoch) would
print a warning (the trainer's run too; ignite's default ``output_transform`` calls
``loss.item()`` every iteration, a synchronization by design). In 4., the ordinary iterations
run under it, and the epoch's last one (which writes the log and the plot) does not.

The managers of 4. are interleaved one epoch at a time, in rotating order; in each epoch the
first ``iters_per_epoch - 1`` iterations are timed together (the per-iteration part, less an
empty Python loop's) and the last one alone (its excess over an ordinary iteration is the
epoch-end part). The first epoch warms up; the figures are medians over ``--ext-epochs``
epochs, and the shares medians of the paired differences.

Usage: ``python benchmarks/loop_overhead.py [--iterations 10000] [--repeats 3]
[--engine-rounds 20] [--chunk 50] [--ext-epochs 8] [--parts mlp empty engines epoch-ext]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

import torch
from ignite.engine import create_supervised_trainer
from ignite.utils import convert_tensor

import pytorch_pfn_extras as ppe
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager, extensions

Block = Callable[[int], None]
Run = Callable[[], None]
Batch = tuple[torch.Tensor, torch.Tensor]


def _extensions(sink: IO[str]) -> list[Any]:
    return [
        extensions.LogReport(),
        extensions.ProgressBar(out=sink),
        extensions.PrintReport(out=sink),
    ]


def _manager(
    out_dir: str, iterations: int, iters_per_epoch: int, sink: IO[str]
) -> ExtensionsManager:
    return ExtensionsManager(
        {},
        {},
        iterations / iters_per_epoch,
        iters_per_epoch=iters_per_epoch,
        out_dir=out_dir,
        extensions=_extensions(sink),
    )


@contextlib.contextmanager
def _sync_check(device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _timed_run(run: Run, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _timed(block: Block, n: int, device: torch.device) -> float:
    return _timed_run(lambda: block(n), device)


def mlp_blocks(device: torch.device) -> tuple[Block, Callable[[ExtensionsManager], Block]]:
    """The bare loop, and the managed loop for a given manager, ``n`` iterations at a time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    t = torch.randn(16, 1, device=device)
    mse = torch.nn.functional.mse_loss
    report = reporting.report

    def bare(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            loss = mse(model(x), t)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()

    def managed(manager: ExtensionsManager) -> Block:
        def block(n: int) -> None:
            for _ in range(n):
                with manager.run_iteration():
                    optimizer.zero_grad()
                    loss = mse(model(x), t)
                    report({"train/loss": loss})
                    loss.backward()  # type: ignore[no-untyped-call]
                    optimizer.step()

        return block

    return bare, managed


def empty_blocks(device: torch.device) -> tuple[Block, Callable[[ExtensionsManager], Block]]:
    value = torch.zeros((), device=device)
    report = reporting.report

    def bare(n: int) -> None:
        for _ in range(n):
            pass

    def managed(manager: ExtensionsManager) -> Block:
        def block(n: int) -> None:
            for _ in range(n):
                with manager.run_iteration():
                    report({"value": value})

        return block

    return bare, managed


def measure(
    blocks: tuple[Block, Callable[[ExtensionsManager], Block]],
    args: argparse.Namespace,
    repeats: int,
    out_dir: str,
    sink: IO[str],
) -> tuple[float, float, float]:
    """Median seconds per iteration: bare, managed, and their paired difference."""
    bare, make_managed = blocks
    epoch = args.iters_per_epoch
    device = torch.device(args.device)
    bare_times: list[float] = []
    managed_times: list[float] = []
    differences: list[float] = []
    for repeat in range(repeats + 1):  # the first one warms up
        manager = _manager(out_dir, args.iterations, epoch, sink)
        managed = make_managed(manager)
        with _sync_check(device):
            for i in range(args.iterations // epoch):
                if (i + repeat) % 2:
                    m = _timed(managed, epoch, device)
                    b = _timed(bare, epoch, device)
                else:
                    b = _timed(bare, epoch, device)
                    m = _timed(managed, epoch, device)
                if repeat:
                    bare_times.append(b / epoch)
                    managed_times.append(m / epoch)
                    differences.append((m - b) / epoch)
        assert manager.stop_trigger  # the run ended: the last log entry was written
    return (
        statistics.median(bare_times),
        statistics.median(managed_times),
        statistics.median(differences),
    )


class _LossModel(torch.nn.Module):
    """The MLP with its loss: ``forward(x, t)`` returns ``{"loss": mse}``, as the trainer's
    default logic needs (it backpropagates from the scalar outputs); all three loops use it."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.net(x), t)}


@contextlib.contextmanager
def _sync_allowed(device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("default")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)


class _Interleaved:
    """The batches, as a loader that runs the hand-written loop on each chunk of batches
    (timed, into ``bare_seconds``) before the engine gets that chunk.

    The engine's iterations and the hand-written ones alternate every few milliseconds, so
    that a change in the machine's load affects both alike; the engine's time is the time of
    its ``run()`` less ``bare_seconds``.
    """

    def __init__(
        self,
        batches: list[Batch],
        chunk: int,
        bare: Callable[[list[Batch]], None],
        device: torch.device,
    ) -> None:
        self._batches = batches
        self._chunk = chunk
        self._bare = bare
        self._device = device
        self.bare_seconds = 0.0

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[Batch]:
        self.bare_seconds = 0.0
        for start in range(0, len(self._batches), self._chunk):
            part = self._batches[start : start + self._chunk]
            with _sync_allowed(self._device):
                self.bare_seconds += _timed_run(functools.partial(self._bare, part), self._device)
            yield from part


def engines(
    device: torch.device, batches: list[Batch], chunk: int
) -> tuple[_Interleaved, Callable[[IO[str], str], dict[str, Run]]]:
    """The loader of ``batches`` (running the hand-written loop every ``chunk`` batches), and
    a function that makes a fresh engine of each kind and returns their one-epoch runs."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = _LossModel(net)
    ppe.to(model, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def bare(batches: list[Batch]) -> None:
        for x, t in batches:
            optimizer.zero_grad()
            model(x, t)["loss"].backward()
            optimizer.step()

    data = _Interleaved(batches, chunk, bare, device)

    def prepare_batch(batch: Batch, device: Any, non_blocking: bool) -> tuple[Any, None]:
        return convert_tensor(batch, device=device, non_blocking=non_blocking), None

    def make(sink: IO[str], out_dir: str) -> dict[str, Run]:
        trainer = ppe.engine.create_trainer(
            model, optimizer, 1, extensions=_extensions(sink), out_dir=out_dir, device=device
        )
        engine = create_supervised_trainer(
            model,
            optimizer,
            lambda outputs, _: outputs["loss"],
            device=device,
            prepare_batch=prepare_batch,
            model_fn=lambda model, batch: model(*batch),
        )

        def run_trainer() -> None:
            with _sync_check(device):
                trainer.run(data)

        def run_ignite() -> None:
            engine.run(data, max_epochs=1)

        return {"create_trainer": run_trainer, "ignite": run_ignite}

    return data, make


class EngineTimes(NamedTuple):
    """Seconds per iteration: medians, and the quartiles of the engines' overheads."""

    bare: float
    engines: dict[str, float]
    overheads: dict[str, tuple[float, float, float]]


def measure_engines(args: argparse.Namespace, out_dir: str, sink: IO[str]) -> EngineTimes:
    """Each round runs one epoch of each engine (in alternating order), with the hand-written
    loop interleaved (see :class:`_Interleaved`); an engine's overhead in a round is its time
    less the hand-written loop's during its epoch."""
    device = torch.device(args.device)
    n = args.iters_per_epoch
    torch.manual_seed(1)
    batches = [
        (torch.randn(16, 32, device=device), torch.randn(16, 1, device=device)) for _ in range(n)
    ]
    data, make = engines(device, batches, args.chunk)
    bare_times: list[float] = []
    times: dict[str, list[float]] = {"create_trainer": [], "ignite": []}
    differences: dict[str, list[float]] = {name: [] for name in times}
    for round_ in range(args.engine_rounds + 1):  # the first one warms up
        runs = list(make(sink, out_dir).items())
        for name, run in runs if round_ % 2 else reversed(runs):
            total = _timed_run(run, device)
            bare = data.bare_seconds
            if round_:
                bare_times.append(bare / n)
                times[name].append((total - bare) / n)
                differences[name].append((total - 2 * bare) / n)
    return EngineTimes(
        statistics.median(bare_times),
        {name: statistics.median(values) for name, values in times.items()},
        {name: _quartiles(values) for name, values in differences.items()},
    )


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    first, median, third = statistics.quantiles(values, n=4)
    return first, median, third


def print_engines(args: argparse.Namespace, out_dir: str, sink: IO[str]) -> None:
    us = 1e6
    measured = measure_engines(args, out_dir, sink)
    bare = measured.bare
    print(
        f"Engines on the MLP with its loss in forward(x, t), {args.iters_per_epoch} pre-made "
        f"batches x {args.engine_rounds} rounds, device {args.device}, interleaved with the "
        f"hand-written loop every {args.chunk} iterations:"
    )
    print(f"  hand-written loop      {bare * us:8.2f} us/iteration")
    for name, label in (("create_trainer", "create_trainer (3 ext.)"), ("ignite", "ignite")):
        first, overhead, third = measured.overheads[name]
        print(f"  {label:<23}{measured.engines[name] * us:8.2f} us/iteration")
        print(
            f"    overhead             {overhead * us:8.2f} us/iteration "
            f"(quartiles {first * us:.1f} to {third * us:.1f}), ratio {(bare + overhead) / bare:.3f}"
        )
    relative = measured.overheads["create_trainer"][1] / measured.overheads["ignite"][1]
    print(f"  trainer / ignite overhead {relative:6.2f}")
    print(
        "  (reference on the 2-core machine: published PPE trainer ~200 us, ignite ~70 us, "
        "Lightning ~1100 us; target < ignite's, ~60 us)"
    )


class Split(NamedTuple):
    """Seconds per iteration of one manager's cost: the ordinary iteration, the epoch end
    amortized over the epoch, and their sum."""

    iteration: float
    epoch_end: float

    @property
    def total(self) -> float:
        return self.iteration + self.epoch_end


_EPOCH_EXT_CONFIGS = ("3 extensions", "+ PlotReport", "+ PlotReport + ParameterStatistics")


def _epoch_ext_managers(
    args: argparse.Namespace, out_dir: str, sink: IO[str]
) -> tuple[dict[str, ExtensionsManager], int]:
    """Managers with the three extensions, with PlotReport added, and with PlotReport and
    ParameterStatistics added, each with the MLP registered; and its number of tensors."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).to(device)
    model(torch.randn(16, 32, device=device)).sum().backward()  # the gradients are reported
    grad_key = "0.weight/grad/mean"  # a ParameterStatistics key, also plotted
    managers: dict[str, ExtensionsManager] = {}
    for i, name in enumerate(_EPOCH_EXT_CONFIGS):
        added: list[Any] = []
        if i >= 1:
            added.append(
                extensions.PlotReport(
                    ["value", grad_key], "epoch", trigger=(1, "epoch"), filename="plot.png"
                )
            )
        if i >= 2:
            added.append(extensions.ParameterStatistics(model, trigger=(1, "epoch")))
        managers[name] = ExtensionsManager(
            {"main": model},
            {},
            args.ext_epochs + 2,  # never reached: finalized by hand, out of the timings
            iters_per_epoch=args.iters_per_epoch,
            out_dir=os.path.join(out_dir, f"epoch-ext-{i}"),
            extensions=[*_extensions(sink), *added],
        )
    return managers, 2 * len(list(model.parameters()))


def measure_epoch_ext(
    args: argparse.Namespace, out_dir: str, sink: IO[str]
) -> tuple[dict[str, Split], dict[str, Split], int, float | None]:
    """Each manager's cost (medians over the epochs), and the shares of PlotReport and of
    ParameterStatistics (medians of the paired differences); the number of tensors; the plot
    worker's CPU seconds per plot (None where it cannot be read)."""
    device = torch.device(args.device)
    n = args.iters_per_epoch
    bare, make_managed = empty_blocks(device)
    managers, tensors = _epoch_ext_managers(args, out_dir, sink)
    blocks = {name: make_managed(manager) for name, manager in managers.items()}
    worker_cpu = _plot_worker_cpu()
    names = list(blocks)
    splits: dict[str, list[Split]] = {name: [] for name in names}
    for epoch in range(args.ext_epochs + 1):  # the first one warms up
        bare_time = _timed(bare, n - 1, device) / (n - 1)
        shift = epoch % len(names)
        for name in names[shift:] + names[:shift]:
            block = blocks[name]
            with _sync_check(device):  # nothing in an ordinary iteration may synchronize
                ordinary = _timed(block, n - 1, device) / (n - 1)
            last = _timed(block, 1, device)
            if epoch:
                splits[name].append(Split(ordinary - bare_time, (last - ordinary) / n))
    for manager in managers.values():
        manager.finalize()
    after = _plot_worker_cpu()
    plots = 2 * (args.ext_epochs + 1)  # two managers have a PlotReport
    plot_cpu = None if worker_cpu is None or after is None else (after - worker_cpu) / plots
    costs = {name: _median_split(values) for name, values in splits.items()}
    shares = {
        "PlotReport": _median_split(
            [_minus(a, b) for a, b in zip(splits[names[1]], splits[names[0]])]
        ),
        "ParameterStatistics": _median_split(
            [_minus(a, b) for a, b in zip(splits[names[2]], splits[names[1]])]
        ),
    }
    return costs, shares, tensors, plot_cpu


def _plot_worker_cpu() -> float | None:
    """CPU seconds used so far by the plot worker process (started if needed); Linux only."""
    from pytorch_pfn_extras.training.extensions import _png_worker

    worker = _png_worker.get_worker()
    try:
        with open(f"/proc/{worker.process_id}/stat") as stat:  # type: ignore[union-attr]
            fields = stat.read().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _minus(a: Split, b: Split) -> Split:
    return Split(a.iteration - b.iteration, a.epoch_end - b.epoch_end)


def _median_split(values: list[Split]) -> Split:
    return Split(
        statistics.median(v.iteration for v in values),
        statistics.median(v.epoch_end for v in values),
    )


def print_epoch_ext(args: argparse.Namespace, out_dir: str, sink: IO[str]) -> None:
    us = 1e6
    n = args.iters_per_epoch
    costs, shares, tensors, plot_cpu = measure_epoch_ext(args, out_dir, sink)
    print(
        f"Empty run_iteration() reporting a 0-d tensor, with ParameterStatistics(model) and "
        f"PlotReport on (1, 'epoch'), MLP 32-64-1 registered ({tensors} tensors: data and "
        f"grad), {n} iterations/epoch x {args.ext_epochs} epochs, device {args.device}:"
    )
    print(
        f"  {'us/iteration':<32}{'per iteration':>13}   "
        f"{'epoch end, amortized (per epoch)':>34}   {'total':>10}"
    )

    def row(label: str, split: Split, spec: str = "", target: str = "") -> None:
        per_epoch = split.epoch_end * n * 1e3
        print(
            f"  {label:<32}{split.iteration * us:{spec}13.2f}   "
            f"{split.epoch_end * us:{spec}10.2f} ({per_epoch:{spec}9.2f} ms/epoch)   "
            f"{split.total * us:{spec}10.2f}{target}"
        )

    row("manager, 3 extensions", costs[_EPOCH_EXT_CONFIGS[0]])
    row("  share of PlotReport", shares["PlotReport"], "+")
    row("  share of ParameterStatistics", shares["ParameterStatistics"], "+")
    row(
        "manager, all 5 extensions",
        costs[_EPOCH_EXT_CONFIGS[2]],
        target="  (target < 50 amortized)",
    )
    if plot_cpu is not None:
        print(
            f"  the plot worker's CPU time, off the training path: {plot_cpu * 1e3:.1f} ms "
            "per plot (matplotlib's first import included)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--iters-per-epoch", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3, help="MLP repetitions")
    parser.add_argument("--empty-repeats", type=int, default=5, help="empty-body repetitions")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--engine-rounds", type=int, default=20, help="rounds of the engine comparison"
    )
    parser.add_argument(
        "--chunk", type=int, default=50, help="engine iterations between hand-written chunks"
    )
    parser.add_argument(
        "--ext-epochs",
        type=int,
        default=8,
        help="epochs of the ParameterStatistics + PlotReport measurement",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["mlp", "empty", "engines", "epoch-ext"],
        default=["mlp", "empty", "engines", "epoch-ext"],
        help="measurements to run",
    )
    args = parser.parse_args()
    if args.iterations % args.iters_per_epoch:
        parser.error("--iterations must be a multiple of --iters-per-epoch")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    us = 1e6
    with tempfile.TemporaryDirectory() as out_dir, open(os.devnull, "w") as sink:
        if "mlp" in args.parts:
            blocks = mlp_blocks(device)
            bare, managed, overhead = measure(blocks, args, args.repeats, out_dir, sink)
            print(
                f"MLP (batch 16, 32 features), {args.iterations} iterations x {args.repeats}, "
                f"device {device}, LogReport + ProgressBar + PrintReport, loss tensor reported:"
            )
            print(f"  hand-written loop      {bare * us:8.2f} us/iteration")
            print(f"  with the manager       {managed * us:8.2f} us/iteration")
            print(f"  overhead               {overhead * us:8.2f} us/iteration")
            print(f"  ratio                  {(bare + overhead) / bare:8.3f}")
        if "empty" in args.parts:
            empty = empty_blocks(device)
            _, _, overhead = measure(empty, args, args.empty_repeats, out_dir, sink)
            print(
                f"Empty run_iteration() reporting a 0-d tensor, {args.iterations} iterations x "
                f"{args.empty_repeats}:"
            )
            print(f"  manager cost           {overhead * us:8.2f} us/iteration  (target < 15)")
        if "engines" in args.parts:
            print_engines(args, out_dir, sink)
        if "epoch-ext" in args.parts:
            print_epoch_ext(args, out_dir, sink)


if __name__ == "__main__":
    main()
