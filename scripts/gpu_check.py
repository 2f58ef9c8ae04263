"""The Python side of ``scripts/gpu_check.sh``: the environment report, the CPU dry run, and the
count of the trainer's host-device synchronizations.

Subcommands (run with the installed distributions on ``PYTHONPATH``, from the repository root):

``env --site DIR [--need-cuda]``
    Python, torch, CUDA, the device, CuPy, ``python -m pytorch_pfn_extras``; the warnings that
    importing torch and CuPy and initializing CUDA emit (with ``filterwarnings = error`` each
    would fail a test); checks that every PPE distribution is the one installed in ``DIR``.
    With ``--need-cuda`` exits 3 where ``torch.cuda.is_available()`` is False.

``dry-run --site DIR [--collect ARGS]... [--parse SCRIPT ARGS]...``
    The install check of ``env``; each ``--collect`` runs ``pytest --collect-only ARGS`` (shell
    words) and needs at least one test and no collection error; each ``--parse`` runs
    ``SCRIPT`` with ``ARGS`` up to its ``ArgumentParser.parse_args()`` and stops there (the
    arguments the GPU run passes are accepted); then ``syncs`` runs a few CPU iterations.

``syncs [--device cuda] [--iters-per-epoch 100] [--epochs 3]``
    ``ppe.engine.create_trainer`` (LogReport, ProgressBar, PrintReport, the loss reported) runs
    under ``torch.cuda.set_sync_debug_mode("warn")``; every synchronization warning is counted in
    the iteration it happened in (a last-priority extension marks the end of each iteration).
    Printed per batch kind (pinned and pageable CPU batches): the synchronizations in the first
    iteration, in the other ordinary iterations (per iteration: should be 0), in the epochs'
    last iterations (LogReport reads the epoch's means there) and outside the iterations, and
    the source line (innermost frame of pytorch_pfn_extras) of each.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import io
import os
import runpy
import shlex
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = sorted((ROOT / "packages").glob("*/pyproject.toml"))


def _name(pyproject: Path) -> str:
    with pyproject.open("rb") as file:
        name: str = tomllib.load(file)["project"]["name"]
    return name


# The distributions of the tree, the meta-package first (read from the pyproject files).
DISTRIBUTIONS = (_name(ROOT / "pyproject.toml"), *(_name(path) for path in _PACKAGES))
# One subpackage of each component: imported from the install, never from the source tree.
SUBPACKAGES = tuple(
    min(sub.parent.name for sub in (path.parent / "src/pytorch_pfn_extras").glob("*/__init__.py"))
    for path in _PACKAGES
)


# ---------------------------------------------------------------- the install


def check_install(site: Path) -> list[str]:
    """The problems of the PPE install in ``site`` (empty: every part comes from there)."""
    site = site.resolve()
    problems = []
    for name in DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"the distribution {name} is not installed")
            continue
        where = Path(str(dist.locate_file(""))).resolve()
        if where != site:
            problems.append(f"the distribution {name} is found in {where}, not in {site}")
    for module in ("pytorch_pfn_extras", *(f"pytorch_pfn_extras.{s}" for s in SUBPACKAGES)):
        try:
            imported = importlib.import_module(module)
        except ImportError as error:
            problems.append(f"import {module} failed: {error}")
            continue
        path = Path(str(imported.__file__)).resolve()
        if site not in path.parents:
            problems.append(f"{module} is imported from {path}, not from {site}")
    bridges = importlib.metadata.entry_points(group="pytorch_pfn_extras.interop_bridges")
    if "cupy" not in bridges.names:
        problems.append("the entry point pytorch_pfn_extras.interop_bridges:cupy is missing")
    return problems


def _report_install(site: Path) -> int:
    problems = check_install(site)
    for problem in problems:
        print(f"ERROR: {problem}")
    if not problems:
        print(f"install: the {len(DISTRIBUTIONS)} distributions come from {site}")
    return 1 if problems else 0


# ---------------------------------------------------------------- env


def _with_warnings(action: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``action()``'s value (or its error as text), and the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = action()
        except Exception as error:  # report, don't stop: the next lines still help
            value = f"failed: {type(error).__name__}: {error}"
    shown = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    return value, shown


def env(args: argparse.Namespace) -> int:
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    torch, torch_warnings = _with_warnings(lambda: importlib.import_module("torch"))
    if isinstance(torch, str):
        print(f"import torch {torch}")
        return 3
    print(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}")
    available, cuda_warnings = _with_warnings(torch.cuda.is_available)
    if available is True:
        _, init_warnings = _with_warnings(lambda: torch.zeros(1, device="cuda"))
        cuda_warnings += init_warnings
        props = torch.cuda.get_device_properties(0)
        print(
            f"CUDA device 0 of {torch.cuda.device_count()}: {props.name}, "
            f"{props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}, "
            f"{props.multi_processor_count} SMs"
        )
    else:
        print(f"torch.cuda.is_available(): {available}")
    cupy, cupy_warnings = _with_warnings(lambda: importlib.import_module("cupy"))
    if isinstance(cupy, str):
        print(f"import cupy {cupy}")
    else:
        runtime = "?"
        with contextlib.suppress(Exception):
            runtime = str(cupy.cuda.runtime.runtimeGetVersion())
        print(f"cupy {cupy.__version__} (CUDA runtime {runtime})")
    for what, caught in (
        ("import torch", torch_warnings),
        ("CUDA init", cuda_warnings),
        ("import cupy", cupy_warnings),
    ):
        for line in caught:
            print(f"WARNING at {what}: {line}")
    from pytorch_pfn_extras import __main__ as ppe_main

    print(ppe_main.report())
    status = _report_install(Path(args.site))
    if args.need_cuda and available is not True:
        print("ERROR: no CUDA device: every gpu test would skip")
        return 3
    return status


# ---------------------------------------------------------------- dry-run


class _Parsed(Exception):
    """Raised by the patched ``parse_args``: the script's arguments were accepted."""


@contextlib.contextmanager
def _stop_after_parse_args() -> Iterator[None]:
    original = argparse.ArgumentParser.parse_args

    def parse_args(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        raise _Parsed(original(self, *a, **k))

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


def parse_only(script: str, arguments: list[str]) -> str | None:
    """Run ``script`` as ``__main__`` until its arguments are parsed; the error, or None."""
    saved = sys.argv
    sys.argv = [script, *arguments]
    stderr = io.StringIO()
    try:
        with _stop_after_parse_args(), contextlib.redirect_stderr(stderr):
            runpy.run_path(script, run_name="__main__")
    except _Parsed:
        return None
    except SystemExit as exit_:
        return f"exited {exit_.code}: {stderr.getvalue().strip()}"
    finally:
        sys.argv = saved
    return "it never called ArgumentParser.parse_args()"


class _Collected:
    def __init__(self) -> None:
        self.items = 0

    def pytest_collection_finish(self, session: Any) -> None:
        self.items = len(session.items)


def collect(arguments: list[str]) -> str | None:
    """``pytest --collect-only`` of ``arguments``: the problem, or None."""
    import pytest

    counter = _Collected()
    code = pytest.main(
        ["-p", "no:cacheprovider", "-qq", "--collect-only", *arguments], plugins=[counter]
    )
    if code != 0:
        return f"pytest --collect-only {shlex.join(arguments)} exited {int(code)}"
    if counter.items == 0:
        return f"pytest --collect-only {shlex.join(arguments)} collected no test"
    print(f"collected {counter.items} tests: {shlex.join(arguments)}")
    return None


def dry_run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    problems = 0 if _report_install(Path(args.site)) == 0 else 1
    for words in args.collect:
        problem = collect(shlex.split(words))
        if problem:
            print(f"ERROR: {problem}")
            problems += 1
    for script, words in args.parse:
        problem = parse_only(script, shlex.split(words))
        if problem:
            print(f"ERROR: {script} {words}: {problem}")
            problems += 1
        else:
            print(f"arguments accepted: {script} {words}")
    lines = count_syncs("cpu", iters_per_epoch=3, epochs=2)
    print("\n".join(lines))
    if not any(line.startswith("RESULT") for line in lines):
        problems += 1
    outcome = "ok" if not problems else f"{problems} problems"
    print(f"dry run: {outcome} in {time.perf_counter() - start:.1f} s")
    return 1 if problems else 0


# ---------------------------------------------------------------- syncs


def _source(stack: traceback.StackSummary) -> str:
    """The innermost frame of pytorch_pfn_extras (else the innermost outside this file)."""
    frames = [f for f in stack if "warnings" not in Path(f.filename).name]
    for frame in reversed(frames):
        if "pytorch_pfn_extras" in frame.filename:
            return f"{frame.filename.split('pytorch_pfn_extras')[-1]}:{frame.lineno} {frame.name}"
    for frame in reversed(frames):
        if frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} {frame.name}"
    return "?"


def _counted_run(
    device_name: str, kind: str, iters_per_epoch: int, epochs: int
) -> tuple[list[str], dict[int, int]]:
    """Train under the sync debug mode: the source of each synchronization, and the number of
    synchronizations seen by the end of each iteration (by iteration number)."""
    import torch

    import pytorch_pfn_extras as ppe
    from pytorch_pfn_extras.training import extensions

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
            )

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), t)}

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = Model()
    data = []
    for _ in range(iters_per_epoch):
        batch = {"x": torch.randn(16, 32), "t": torch.randint(0, 4, (16,))}
        data.append({k: v.pin_memory() for k, v in batch.items()} if kind == "pinned" else batch)
    syncs: list[str] = []
    marks: dict[int, int] = {}

    def mark(manager: Any) -> None:
        marks[manager.iteration] = len(syncs)

    def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        if "synchroniz" in str(message):
            syncs.append(_source(traceback.extract_stack()))
        else:
            print(f"warning: {category.__name__}: {message}", file=sys.stderr)

    sink = io.StringIO()
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = ppe.engine.create_trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            epochs,
            device=device,
            out_dir=out_dir,
            options={"train_report_keys": ["loss"]},
            extensions=[
                extensions.LogReport(),
                extensions.ProgressBar(update_interval=10, out=sink),
                extensions.PrintReport(out=sink),
            ],
        )
        ppe.runtime.to(model, device)
        trainer.extend(mark, trigger=(1, "iteration"), priority=-(10**9))  # runs last
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.run(data)
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode("default")
    return syncs, marks


def count_syncs(device_name: str, iters_per_epoch: int, epochs: int) -> list[str]:
    """The report lines of :func:`syncs` (see the module's docstring)."""
    lines = []
    # Pinning needs CUDA; the trainer copies pinned batches to the device without waiting.
    kinds = ("pinned", "pageable") if device_name.startswith("cuda") else ("pageable",)
    for kind in kinds:
        syncs, marks = _counted_run(device_name, kind, iters_per_epoch, epochs)
        iterations = epochs * iters_per_epoch
        if sorted(marks) != list(range(1, iterations + 1)):
            lines.append(f"ERROR: the marker ran at iterations {sorted(marks)[:5]}...")
            continue
        per = {i: marks[i] - marks.get(i - 1, 0) for i in marks}
        ends = [i for i in per if i % iters_per_epoch == 0]
        ordinary = [i for i in per if i != 1 and i % iters_per_epoch]
        in_ordinary = sum(per[i] for i in ordinary)
        outside = len(syncs) - marks[iterations]
        lines.append(
            f"RESULT trainer syncs, {device_name} ({kind} batches), {epochs} epochs x "
            f"{iters_per_epoch} iterations: first iteration {per[1]}; ordinary iterations "
            f"{in_ordinary} in {len(ordinary)} ({in_ordinary / max(len(ordinary), 1):.2f} per "
            f"iteration); epoch ends {sum(per[i] for i in ends)} in {len(ends)}; "
            f"after the last iteration {outside}"
        )
        for source, count in Counter(syncs).most_common():
            lines.append(f"  {count:5d} x {source}")
    return lines


def syncs(args: argparse.Namespace) -> int:
    lines = count_syncs(args.device, args.iters_per_epoch, args.epochs)
    print("\n".join(lines))
    return 1 if any(line.startswith("ERROR") for line in lines) else 0


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    env_parser = commands.add_parser("env", help="the environment report and install check")
    env_parser.add_argument("--site", required=True)
    env_parser.add_argument("--need-cuda", action="store_true")
    dry = commands.add_parser("dry-run", help="collection, arguments, syncs on the CPU")
    dry.add_argument("--site", required=True)
    dry.add_argument("--collect", action="append", default=[], metavar="ARGS")
    dry.add_argument("--parse", action="append", default=[], nargs=2, metavar=("SCRIPT", "ARGS"))
    count = commands.add_parser("syncs", help="the trainer's host-device synchronizations")
    count.add_argument("--device", default="cuda")
    count.add_argument("--iters-per-epoch", type=int, default=100)
    count.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    return int({"env": env, "dry-run": dry_run, "syncs": syncs}[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
