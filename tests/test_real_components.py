"""The real components the tests promise: required where CI is set, counted for check.sh.

The root ``conftest.py`` turns a skip that says a real component (OpenMPI, Slurm, the S3 server,
ignite...) is missing into a failure where the run requires them (``CI``, or
``PPE_REQUIRE_REAL_COMPONENTS=1`` as ``.ci/run`` sets), and writes each run's counts into
``PPE_REAL_COMPONENTS_DIR``; ``scripts/real_components.py`` sums them up at the end of
``scripts/check.sh``. The hooks are run here on small test files in a scratch folder, with a copy
of that conftest.py, in a pytest of their own (and under pytest-xdist, whose controller counts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

RUNTIME_SKIPS = """
import pytest


@pytest.fixture
def slurm_cluster():
    pytest.skip("the Slurm cluster of the tests did not start: slurmctld exited")


def test_mpirun_missing():
    pytest.skip("needs OpenMPI's mpirun: run scripts/install_mpi.sh")


def test_slurm_did_not_start(slurm_cluster):
    pass


@pytest.mark.slurm
def test_marked_slurm_skips_for_a_reason_of_its_own():
    pytest.skip("sbatch refused the job")


@pytest.mark.mpi
def test_without_cuda():
    pytest.skip("needs a CUDA device")


@pytest.mark.mpi
def test_marked_mpi_runs():
    pass


def test_imports_nbformat():
    import nbformat

    assert nbformat.__name__ == "nbformat"
"""

MODULE_SKIP = """
import pytest

pytest.importorskip("nbformat.no_such_module")


def test_never_collected():
    pass
"""

LEFT_OUT = """
import pytest

pytest.importorskip("optuna.no_such_module", reason="the optuna extra is not installed")


def test_never_collected():
    pass
"""


@pytest.fixture
def scratch(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder with the root conftest.py and the test files above."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = -p no:cacheprovider -ra --strict-markers\n"
        "markers =\n    mpi: MPI\n    slurm: Slurm\n"
    )
    (tmp_path / "test_runtime.py").write_text(RUNTIME_SKIPS)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    (tmp_path / "test_left_out.py").write_text(LEFT_OUT)
    return tmp_path


def run_pytest(folder: pathlib.Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in ``folder``, with this environment but its CI and PPE_ settings replaced by
    ``env``."""
    base = {
        k: v for k, v in os.environ.items() if k != "CI" and not k.startswith(("PPE_", "PYTEST_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=folder,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def missing_in(out: str, start: str) -> str | None:
    """The component that the short-summary line of ``out`` starting with ``start`` names."""
    for line in out.splitlines():
        if line.startswith(start + " - conftest.RealComponentMissing: "):
            name, _, rest = line.split(": ", 1)[1].partition(" is missing or does not work here")
            assert rest.startswith(", and this run requires every real component"), line
            return name
    return None


def counts_in(folder: pathlib.Path) -> dict[str, Any]:
    files = list(folder.glob("*.json"))
    assert len(files) == 1, files  # one per run: the controller's, not the workers'
    counts: dict[str, Any] = json.loads(files[0].read_text())
    return counts


def test_outside_ci_a_missing_component_skips_with_its_reason_and_is_counted(
    scratch: pathlib.Path,
) -> None:
    result = run_pytest(scratch, "-q", PPE_REAL_COMPONENTS_DIR=str(scratch / "counts"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed, 6 skipped" in result.stdout
    assert "SKIPPED [1] test_runtime.py:11: needs OpenMPI's mpirun" in result.stdout
    counts = counts_in(scratch / "counts")
    assert counts["required"] is False
    components = counts["components"]
    assert components["OpenMPI"] == {
        "passed": 1,  # marked mpi
        "failed": 0,
        "skipped": 2,  # by the reason; and marked mpi, without CUDA
        "failed_here": 0,
        "reasons": ["needs OpenMPI's mpirun: run scripts/install_mpi.sh", "needs a CUDA device"],
        "left_out": False,
    }
    assert (components["Slurm"]["skipped"], components["Slurm"]["passed"]) == (2, 0)
    # imported in the test function; and the module skipped at collection
    assert (components["Jupyter kernel"]["passed"], components["Jupyter kernel"]["skipped"]) == (
        1,
        1,
    )
    assert components["optuna"]["skipped"] == 1
    assert components["onnxruntime"] == {
        "passed": 0, "failed": 0, "skipped": 0, "failed_here": 0, "reasons": [], "left_out": False
    }  # fmt: skip


def test_in_ci_a_missing_component_fails_naming_it_and_other_skips_stay(
    scratch: pathlib.Path,
) -> None:
    result = run_pytest(
        scratch,
        "-q",
        "-n",
        "2",
        CI="true",
        PPE_EXTRAS_LEFT_OUT="yaml,optuna",
        PPE_REAL_COMPONENTS_DIR=str(scratch / "counts"),
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    # the short summary: "FAILED nodeid - conftest.RealComponentMissing: ..." (ERROR at setup)
    assert missing_in(out, "FAILED test_runtime.py::test_mpirun_missing") == "OpenMPI"
    assert missing_in(out, "ERROR test_runtime.py::test_slurm_did_not_start") == "Slurm"
    # a test marked slurm that skips for any other reason fails too
    marked = "FAILED test_runtime.py::test_marked_slurm_skips_for_a_reason_of_its_own"
    assert missing_in(out, marked) == "Slurm"
    assert missing_in(out, "ERROR test_module_skip.py") == "Jupyter kernel"
    assert "No module named 'nbformat.no_such_module'" in out
    # not a real component (the skip of a test marked mpi: no CUDA); left out on purpose
    assert "SKIPPED [1] test_runtime.py:25: needs a CUDA device" in out
    assert "SKIPPED [1] test_left_out.py:4: the optuna extra is not installed" in out
    assert out.splitlines()[-1].startswith("2 failed, 2 passed, 2 skipped, ")
    counts = counts_in(scratch / "counts")
    assert counts["required"] is True
    components = counts["components"]
    assert components["Slurm"]["skipped"] == components["Slurm"]["failed_here"] == 2
    assert components["Jupyter kernel"]["failed_here"] == 1
    assert components["optuna"]["left_out"] is True
    assert components["optuna"]["failed_here"] == 0


@pytest.mark.parametrize(
    ("env", "status"),
    [
        ({"PPE_REQUIRE_REAL_COMPONENTS": "1"}, pytest.ExitCode.INTERRUPTED),
        ({"CI": "true", "PPE_REQUIRE_REAL_COMPONENTS": "0"}, pytest.ExitCode.OK),
    ],
)
def test_ppe_require_real_components_decides_over_ci(
    scratch: pathlib.Path, env: dict[str, str], status: int
) -> None:
    # without pytest-xdist, a module skipped at collection becomes a collection error
    result = run_pytest(scratch, "-q", "test_runtime.py", "test_module_skip.py", **env)
    assert result.returncode == status, result.stdout + result.stderr
    assert ("Jupyter kernel is missing" in result.stdout) == (status != pytest.ExitCode.OK)


def test_a_broken_openmpi_install_turns_the_real_mpi_test_red_in_ci(
    tmp_path: pathlib.Path,
) -> None:
    # ppe-training's real test and fixture, with a PATH that holds no mpirun (as where
    # scripts/install_mpi.sh failed): red in CI, naming OpenMPI and what to install
    (tmp_path / "bin").mkdir()
    result = run_pytest(
        ROOT,
        "-q",
        "-p",
        "no:cacheprovider",
        "packages/ppe-training/tests/test_distributed_mpi.py",
        CI="true",
        PATH=str(tmp_path / "bin"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RealComponentMissing: OpenMPI is missing or does not work here" in result.stdout
    assert "needs OpenMPI's mpirun: run scripts/install_mpi.sh" in result.stdout


def test_the_reasons_of_the_fixtures_name_their_component(
    tmp_path: pathlib.Path,
) -> None:
    # the Slurm fixture's message read from it: a change of wording that the root conftest.py
    # would no longer recognise fails here
    import ppe_training_tests_slurm as slurm  # type: ignore[import-not-found]

    conftest = load_script(ROOT / "conftest.py", "ppe_root_conftest_copy")
    components = {c.name: c for c in conftest.REAL_COMPONENTS}
    unavailable = slurm.slurm_unavailable(str(tmp_path))
    assert unavailable is not None
    assert components["Slurm"].said_missing(unavailable)
    s3 = "needs moto[server], pfio and s3fs (moto missing): pip install 'ppe-training[s3]'"
    assert components["S3 server (moto, pfio, s3fs)"].said_missing(s3)
    assert components["ignite"].said_missing("could not import 'ignite.engine': No module named")
    assert not components["ignite"].said_missing("docs/trainer.md:12: needs ignite")
    assert not components["OpenMPI"].said_missing("needs several processes started by mpirun")


# ---------------------------------------------------------------------- the summary of check.sh


def load_script(path: pathlib.Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


summary = load_script(ROOT / "scripts/real_components.py", "ppe_real_components_summary")


def counts(passed: int = 0, skipped: int = 0, **others: Any) -> dict[str, Any]:
    base = {"passed": passed, "failed": 0, "skipped": skipped, "failed_here": 0, "reasons": []}
    return {**base, "left_out": False, **others}


def test_the_summary_says_which_suites_ran_and_which_skipped_with_counts(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    training = {
        "environment": ".venvs/ppe-training",
        "required": False,
        "components": {
            "OpenMPI": counts(3),
            "Slurm": counts(skipped=4, reasons=["the Slurm tests need slurmd, not found"]),
            "S3 server (moto, pfio, s3fs)": counts(skipped=2, failed_here=2, reasons=["no moto"]),
            "ignite": counts(5, 1, reasons=["could not import 'ignite.contrib'"]),
            "optuna": counts(),
            "torchdata": counts(),
        },
    }
    config = {
        "environment": ".venvs/ppe-config",
        "required": False,
        "components": {"optuna": counts(skipped=1, left_out=True, reasons=["no optuna"])},
    }
    meta = {
        "environment": ".venv",
        "required": False,
        "components": {"OpenMPI": counts(1), "optuna": counts(12)},
    }
    for name, data in (("a", training), ("b", config), ("c", meta)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    assert summary.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:] if not line.startswith("    ")] == [
        "ran", "SKIPPED", "MISSING", "ran,", "ran", "no", "real",
    ]  # fmt: skip
    text = "\n".join(lines)
    assert "ran                OpenMPI\n" in text
    assert ".venvs/ppe-training: 3 passed\n" in text
    assert ".venv: 1 passed\n" in text
    assert "SKIPPED            Slurm\n" in text
    assert ".venvs/ppe-training: 4 skipped\n" in text
    assert "skipped: the Slurm tests need slurmd, not found" in text
    assert "MISSING            S3 server (moto, pfio, s3fs)\n" in text
    assert ".venvs/ppe-training: 2 skipped (2 of them failures: this run requires it)\n" in text
    assert "ran, some skipped  ignite" in text
    assert ".venvs/ppe-config: 1 skipped, left out of this environment on purpose" in text
    assert lines[-1] == (
        "real components: 2 ran; 1 SKIPPED (Slurm); 1 MISSING (S3 server (moto, pfio, s3fs));"
        " 1 ran, some skipped (ignite); 1 no test (torchdata)"
    )


def test_the_summary_refuses_a_folder_without_counts_or_with_other_json(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert summary.main([str(tmp_path)]) == 2
    assert (
        f"{tmp_path} holds no counts (*.json): no pytest run wrote any" in capsys.readouterr().err
    )
    (tmp_path / "x.json").write_text(json.dumps({"environment": ".venv", "components": {"a": {}}}))
    assert summary.main([str(tmp_path)]) == 2
    assert (
        f"{tmp_path / 'x.json'}: not the counts the root conftest.py writes (KeyError: 'passed')"
        in (capsys.readouterr().err)
    )
