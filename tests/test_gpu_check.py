"""``scripts/gpu_check.sh``, the check run on a GPU machine, stays runnable where CI has no GPU.

``--cpu`` runs its setup (the wheels built from this tree and installed into a target folder),
collects the ``gpu`` tests and the CUDA pages it runs, checks that the benchmarks accept the
GPU run's arguments and counts the synchronizations of a few CPU trainer iterations.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def _helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ppe_gpu_check", ROOT / "scripts/gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_cpu_dry_run_installs_the_wheels_collects_the_gpu_tests_and_parses_the_arguments(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    env.pop("OUT", None)  # the logs stay in the scratch folder
    result = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out[-6000:] + result.stderr[-3000:]
    installed = re.search(r"^installed into \S+: (.*)$", out, re.MULTILINE)
    assert installed is not None, out
    names = set(installed.group(1).split())
    assert {"ppe_core-0.1.0", "ppe_runtime_cuda-0.1.0", "ppe_training-0.1.0"} <= names
    assert "install: the 7 distributions come from" in out
    gpu = re.search(r"^collected (\d+) tests: -m gpu ", out, re.MULTILINE)
    assert gpu is not None and int(gpu.group(1)) >= 50, out
    pages = re.search(
        r"^collected \d+ tests: -m 'not gpu' packages/ppe-runtime-cuda/tests .*", out, re.M
    )
    assert pages is not None and "[docs/ppe-runtime-cuda.md]" in pages.group(0), out
    for accepted in (
        "benchmarks/loop_overhead.py --device cuda",
        "benchmarks/sharded_snapshot.py --device cuda --ranks 1",
        "scripts/gpu_check.py syncs --device cuda",
    ):
        assert f"arguments accepted: {accepted}" in out
    assert re.search(r"RESULT trainer syncs, cpu .*ordinary iterations 0 in 3 ", out), out
    assert out.rstrip().endswith("== all steps passed")
    assert not list(tmp_path.glob("ppe-gpu-check.*"))  # the scratch folder is removed


def test_the_argument_check_names_an_option_the_benchmark_does_not_have() -> None:
    helper = _helper()
    problem = helper.parse_only("benchmarks/sharded_snapshot.py", ["--device", "tpu"])
    assert problem is not None and "invalid choice: 'tpu'" in problem
    problem = helper.parse_only("benchmarks/sharded_snapshot.py", ["--no-such-option"])
    assert problem is not None and "unrecognized arguments: --no-such-option" in problem
    assert helper.parse_only("benchmarks/sharded_snapshot.py", ["--device", "cuda"]) is None


def test_the_install_check_names_distributions_found_outside_the_target(tmp_path: Path) -> None:
    problems = _helper().check_install(tmp_path)
    assert any(
        p.startswith("the distribution ppe-core is found in") and str(tmp_path) in p
        for p in problems
    ), problems


def test_the_cupy_extra_installs_the_cuda_13_cupy() -> None:
    project = tomllib.loads((ROOT / "packages/ppe-runtime-cuda/pyproject.toml").read_text())
    assert project["project"]["optional-dependencies"]["cupy"] == ["cupy-cuda13x>=13.6"]
