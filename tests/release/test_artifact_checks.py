"""scripts/check_wheels.py's release checks: sdist = wheel, and the metadata users rely on."""

from __future__ import annotations

import email.message
import importlib.util
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_wheels", ROOT / "scripts" / "check_wheels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hatchling_build(project: pathlib.Path, out: pathlib.Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=project,
        check=True,
        capture_output=True,
    )


def tiny_project(root: pathlib.Path, sdist_config: str) -> pathlib.Path:
    project = root / "tiny"
    (project / "src" / "tiny").mkdir(parents=True)
    (project / "src" / "tiny" / "__init__.py").write_text("from tiny.helper import X\n")
    (project / "src" / "tiny" / "helper.py").write_text("X = 1\n")
    (project / "README.md").write_text("# tiny\n\nA tiny project.\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "tiny"\nversion = "1.0"\nreadme = "README.md"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/tiny"]\n' + sdist_config
    )
    return project


@pytest.mark.parametrize(
    ("sdist_config", "expected"),
    [
        ("", []),
        (
            '[tool.hatch.build.targets.sdist]\nexclude = ["src/tiny/helper.py"]\n',
            ["tiny: tiny/helper.py is in the wheel built from the tree, not in the sdist's"],
        ),
    ],
)
def test_a_file_forgotten_in_the_sdist_is_named(
    checker: ModuleType, tmp_path: pathlib.Path, sdist_config: str, expected: list[str]
) -> None:
    project = tiny_project(tmp_path, sdist_config)
    hatchling_build(project, tmp_path / "dist")
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    from_sdist = checker.wheel_from_sdist(sdist, tmp_path / "work")
    problems = checker.sdist_problems("tiny", checker.contents(wheel), checker.contents(from_sdist))
    # a forgotten module also changes the RECORD that lists it
    assert [p for p in problems if "RECORD" not in p] == expected


def test_a_file_that_differs_is_named(checker: ModuleType) -> None:
    tree = {"a/x.py": b"1", "a/y.py": b"2"}
    assert checker.sdist_problems("d", tree, {"a/x.py": b"1", "a/y.py": b"3", "a/z.py": b""}) == [
        "d: a/z.py is only in the wheel built from the sdist",
        "d: a/y.py differs between the wheel built from the tree and the sdist's",
    ]


def test_every_distribution_s_wheel_metadata_is_complete(
    checker: ModuleType, tmp_path: pathlib.Path
) -> None:
    for dist in checker.OWNERS:
        project = ROOT if dist == "pytorch-pfn-extras" else ROOT / "packages" / dist
        out = tmp_path / dist
        subprocess.run(
            [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
            cwd=project,
            check=True,
            capture_output=True,
        )
        (wheel,) = out.glob("*.whl")
        metadata = checker.wheel_metadata(checker.contents(wheel))
        assert checker.metadata_problems(dist, metadata) == []
        assert metadata["Description-Content-Type"] == "text/markdown"
        assert metadata["License-Expression"] == "MIT"


def test_missing_metadata_is_named_field_by_field(checker: ModuleType) -> None:
    metadata = email.message.Message()
    metadata["Name"] = "ppe-core"
    metadata["Summary"] = "PPE core"
    metadata["Project-URL"] = "Homepage, https://example.invalid"
    metadata["Requires-Dist"] = "torch"
    assert checker.metadata_problems("ppe-core", metadata) == [
        "ppe-core: metadata has no License-Expression",
        "ppe-core: metadata has no Requires-Python",
        "ppe-core: metadata has no Description-Content-Type",
        "ppe-core: metadata has no Documentation URL",
        "ppe-core: metadata has no Source URL",
        "ppe-core: metadata has no Issues URL",
        "ppe-core: metadata has no long description (the README)",
        "ppe-core: metadata declares no lower bound for torch",
    ]
