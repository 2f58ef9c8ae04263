"""Shared helpers of the ppe-training tests (as fixtures): free TCP ports, OpenMPI's mpirun,
``python -m torch.distributed.run``, the uninterrupted run of ``sharded_train.py`` that
resumed runs are compared with, and a single-node Slurm cluster; and the summary of the
fault-injection tests' counts at the end of the session. No test may leave a torch.distributed
process group behind (``no_leaked_process_group``)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def _group_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")  # not imported here: no test used it yet
    return dist is not None and dist.is_available() and dist.is_initialized()


def _destroy_group() -> None:
    sys.modules["torch.distributed"].destroy_process_group()


@pytest.fixture(autouse=True)
def no_leaked_process_group(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that leaves torch.distributed's default process group initialized.

    The group is destroyed then, so that the next tests start without one; a test that finds
    one already (left by code outside these tests) fails too.
    """
    if _group_initialized():
        _destroy_group()
        pytest.fail(
            f"torch.distributed's default process group was already initialized when "
            f"{request.node.nodeid} started (not by a test of this package: they are checked)"
        )
    yield
    if _group_initialized():
        _destroy_group()
        pytest.fail(
            f"{request.node.nodeid} left torch.distributed's default process group "
            "initialized: call torch.distributed.destroy_process_group() before it ends"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A function returning a TCP port of 127.0.0.1 free when called (one per process group)."""
    return _free_port


@pytest.fixture
def mpirun() -> str:
    """The path of OpenMPI's ``mpirun``; the test is skipped without it or without mpi4py."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.skip(
            "needs OpenMPI's mpirun: run scripts/install_mpi.sh (apt-get install openmpi-bin "
            "libopenmpi-dev, as root)"
        )
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("needs mpi4py in this environment: run scripts/install_mpi.sh")
    return path


# Plain torch DDP on gloo aborts at exit now and then on a loaded machine ("terminate called
# without an active exception", about 1 run in 20, with no project code involved).
ABORT_AT_EXIT = "terminate called without an active exception"


def aborted_at_exit(process: subprocess.CompletedProcess[str]) -> bool:
    """Whether a torchrun run failed by that abort alone: a rank ended so (SIGABRT) and any
    other was stopped by the agent (SIGTERM)."""
    codes = set(re.findall(r"exitcode\s*:\s*(-?\d+)", process.stderr))
    return (
        process.returncode != 0
        and ABORT_AT_EXIT in process.stderr
        and bool(codes)
        and codes <= {str(-signal.SIGABRT), str(-signal.SIGTERM)}
    )


def _torchrun(
    nproc: int,
    script: str | Path,
    *args: str,
    launcher: Sequence[str] = ("--standalone",),
    env: Mapping[str, str] | None = None,
    timeout: float = 240,
    rerun_from: Path | None = None,
    rerun_if: Callable[[subprocess.CompletedProcess[str]], bool] = aborted_at_exit,
    before_each: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``script`` under ``python -m torch.distributed.run`` with ``nproc`` local processes.

    ``launcher`` holds torchrun's own options besides ``--nproc-per-node``; the processes
    get one intra-op thread each and warnings off (``env`` adds to or overrides that).
    The result is returned unchecked, output captured. With ``rerun_from`` (the folder the
    run writes), a run that failed by DDP's abort at exit alone (``rerun_if``, by default
    `aborted_at_exit`), and only such a run, is run again from a copy of that folder as it was
    before (up to 3 runs; the last one is returned). ``before_each`` is called before each run.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launcher,
        "--nproc-per-node",
        str(nproc),
        str(script),
        *args,
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **(env or {})}
    before = None if rerun_from is None else rerun_from.with_name(rerun_from.name + ".before")
    if before is not None and rerun_from is not None:
        shutil.rmtree(before, ignore_errors=True)
        if rerun_from.exists():
            shutil.copytree(rerun_from, before)
    for _ in range(3):
        if before_each is not None:
            before_each()
        process = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=environment, check=False
        )
        if before is None or rerun_from is None or not rerun_if(process):
            break
        shutil.rmtree(rerun_from, ignore_errors=True)
        if before.exists():
            shutil.copytree(before, rerun_from)
    return process


@pytest.fixture(scope="session")
def torchrun() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``torchrun(nproc, script, *args, launcher=("--standalone",), env=None, timeout=240,
    rerun_from=None, rerun_if=aborted_at_exit, before_each=None)``: the script on ``nproc``
    local processes, its completed process returned unchecked (run again, from ``rerun_from``
    as it was, after DDP's abort at exit)."""
    return _torchrun


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The seed of the test's random choices (iterations to signal at...), printed with how to
    replay it: ``PPE_TEST_SEED`` when set; in CI (``CI`` set) one fixed per test, as CI runs
    the property tests derandomized; otherwise a fresh one."""
    import random
    import zlib

    given = os.environ.get("PPE_TEST_SEED")
    if given:
        try:
            chosen = int(given)
        except ValueError:
            message = f"PPE_TEST_SEED must be an integer seed, got {given!r}"
            raise ValueError(message) from None
    elif os.environ.get("CI"):
        chosen = zlib.crc32(request.node.name.encode())
    else:
        chosen = random.randrange(1 << 30)
    print(f"{request.node.name}: random choices from seed {chosen} (PPE_TEST_SEED={chosen})")
    return chosen


@pytest.fixture(scope="session")
def sharded_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The result of an uninterrupted ``sharded_train.py`` run on the local disk, without
    torch.distributed (in this process: no start-up cost)."""
    import importlib.util

    import torch

    script = Path(__file__).with_name("sharded_train.py")
    out = tmp_path_factory.mktemp("sharded_reference")
    spec = importlib.util.spec_from_file_location("ppe_training_sharded_train", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(out), "--result", str(out / "result.pt")])
    return torch.load(out / "result.pt", weights_only=True)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def assert_same_training() -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """``assert_same_training(result, reference)``: a resumed ``sharded_train.py`` run ended
    where the uninterrupted one did: weights, learning rate, and a log of every iteration once
    with the same losses."""

    def check(result: dict[str, Any], reference: dict[str, Any]) -> None:
        import torch

        assert result["iteration"] == reference["iteration"] == 12
        for name, value in reference["weights"].items():
            torch.testing.assert_close(result["weights"][name], value, rtol=1e-4, atol=1e-5)
        assert result["lr"] == pytest.approx(reference["lr"])
        assert [i for i, _ in result["log"]] == list(range(1, 13))
        assert [v for _, v in result["log"]] == pytest.approx([v for _, v in reference["log"]])

    return check


def _load_slurm() -> ModuleType:
    """``_slurm.py`` beside this file, loaded once under the name ``ppe_training_tests_slurm``
    (the test modules import it by that name: this directory is not on ``sys.path``)."""
    name = "ppe_training_tests_slurm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_slurm.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_slurm = _load_slurm()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_slurm.SlurmCluster]:
    """A started single-node Slurm cluster (``_slurm.SlurmCluster``) of this test process, on
    127.0.0.1, stopped at the end. The test is skipped, with the reason, where Slurm is not
    installed (``scripts/install_slurm.sh``) or its daemons do not start (their log tails)."""
    reason = _slurm.slurm_unavailable()
    if reason is not None:
        pytest.skip(reason)
    cluster = _slurm.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()  # stops what it started when it fails
    except _slurm.SlurmError as error:
        pytest.skip(f"the Slurm cluster of the tests did not start: {error}")
    try:
        yield cluster
    finally:
        cluster.stop()


# The counts each fault-injection test records (test_fault_injection.py, as the user property
# "fault_injection" of its report: pytest-xdist sends reports from its workers to the
# controller, where this hook collects them), printed by pytest_terminal_summary.
_fault_counts: list[dict[str, Any]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "fault_injection" and isinstance(value, dict):
            _fault_counts.append(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _fault_counts:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault injection")
    cases = failures = 0
    for counts in sorted(_fault_counts, key=lambda c: str(c["scenario"])):
        cases += counts["cases"]
        failures += counts["failures"]
        sampled = " (sampled)" if counts["sampled"] else ""
        refused = f", {counts['refused']} resumes refused loudly" if counts["refused"] else ""
        write(
            f"{counts['scenario']}: {counts['operations']} operations, {counts['faulted']} "
            f"faulted{sampled} x {counts['faults']} faults = {counts['cases']} cases "
            f"({counts['resumes']} distinct resumes), {counts['failures']} broken "
            f"invariants{refused}"
        )
    verdict = "none lost anything" if not failures else f"{failures} broken invariants"
    write(
        f"fault injection: {cases} cases (operation x fault) in {len(_fault_counts)} "
        f"scenarios, {verdict}"
    )
