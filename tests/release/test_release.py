"""scripts/release.py, run as a maintainer would on a scratch copy of the repository.

Each test copies the repository's tracked files into a fresh git repository and runs the
copy's own ``scripts/release.py`` (and ``hatch``) there; nothing touches the checkout.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
DATE = "2031-02-03"


@pytest.fixture(scope="session")
def tool_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """hatch's build environments and uv's cache in a temporary folder, shared by the tests."""
    base = tmp_path_factory.mktemp("hatch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "HATCH_"))}
    env.update(HATCH_DATA_DIR=str(base / "data"), UV_CACHE_DIR=str(base / "uv"))
    return env


@pytest.fixture
def repo(tmp_path: pathlib.Path, tool_env: dict[str, str]) -> pathlib.Path:
    """A committed scratch copy of the repository (tracked and new, non-ignored files)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    copy = tmp_path / "repo"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file() and not name.startswith(("tests/", "docs/", "examples/")):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    git(copy, "init", "-q")
    commit(copy, "scratch copy")
    return copy


def git(repo: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def commit(repo: pathlib.Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def release(
    repo: pathlib.Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/release.py", *args, "--date", DATE],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def version_of(repo: pathlib.Path, dist: str) -> str:
    path = {
        "ppe-core": "packages/ppe-core/src/pytorch_pfn_extras/runtime/_version.py",
        "ppe-config": "packages/ppe-config/src/pytorch_pfn_extras/config/_version.py",
        "ppe-dataset": "packages/ppe-dataset/src/pytorch_pfn_extras/dataset/_version.py",
    }[dist]
    match = re.search(r'__version__ = "([^"]+)"', (repo / path).read_text())
    assert match is not None
    return match.group(1)


def meta_requirement(repo: pathlib.Path, dist: str) -> str:
    dependencies = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    (found,) = [d for d in dependencies if re.match(rf"{dist}\b[<>=]", d)]
    return str(found)


def write_changelog(repo: pathlib.Path, dist: str, text: str) -> None:
    (repo / "packages" / dist / "CHANGELOG.md").write_text(text)
    commit(repo, f"{dist}: changelog")


def test_hatch_version_minor_changes_only_that_component(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatch", "version", "minor"],
        cwd=repo / "packages" / "ppe-config",
        env=tool_env,
        capture_output=True,
        check=True,
    )
    changed = git(repo, "diff", "--name-only").split()
    assert changed == ["packages/ppe-config/src/pytorch_pfn_extras/config/_version.py"]
    assert version_of(repo, "ppe-config") == "0.2.0"


def test_a_minor_release_dates_the_changelog_moves_the_meta_range_and_prints_the_tag(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    write_changelog(
        repo,
        "ppe-core",
        "# Changelog of ppe-core\n\n## Unreleased\n\n- New: a thing.\n\n"
        "## 0.1.0 (2030-01-01)\n\n- First release.\n",
    )
    result = release(repo, tool_env, "ppe-core", "minor")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "tag: ppe-core-v0.2.0"
    assert version_of(repo, "ppe-core") == "0.2.0"
    assert (repo / "packages/ppe-core/CHANGELOG.md").read_text() == (
        "# Changelog of ppe-core\n\n## Unreleased\n\n## 0.2.0 (2031-02-03)\n\n- New: a thing.\n\n"
        "## 0.1.0 (2030-01-01)\n\n- First release.\n"
    )
    assert meta_requirement(repo, "ppe-core") == "ppe-core>=0.2,<0.3"
    # the components built on ppe-core keep their declared range, and the maintainer is told
    for dependent in ("ppe-training", "ppe-runtime-cuda", "ppe-onnx"):
        assert f"warning: {dependent} requires ppe-core>=0.1,<0.2, which excludes 0.2.0" in (
            result.stdout
        )
    assert sorted(git(repo, "diff", "--name-only").split()) == [
        "packages/ppe-core/CHANGELOG.md",
        "packages/ppe-core/src/pytorch_pfn_extras/runtime/_version.py",
        "pyproject.toml",
    ]


def test_a_patch_release_inside_the_range_leaves_the_meta_package_alone(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    write_changelog(
        repo,
        "ppe-dataset",
        "# Changelog\n\n## Unreleased\n\n- Fix: a bug.\n\n## 0.1.0 (2030-01-01)\n\n- First.\n",
    )
    before = meta_requirement(repo, "ppe-dataset")
    result = release(repo, tool_env, "ppe-dataset", "micro")
    assert result.returncode == 0, result.stderr
    assert "tag: ppe-dataset-v0.1.1" in result.stdout
    assert meta_requirement(repo, "ppe-dataset") == before
    assert "warning" not in result.stdout
    assert "pyproject.toml" not in git(repo, "diff", "--name-only").split()


def test_the_first_release_keeps_the_version_and_merges_the_unreleased_entries(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    write_changelog(
        repo,
        "ppe-config",
        "# Changelog of ppe-config\n\n## Unreleased\n\n- Later: b.\n\n"
        "## 0.1.0 (unreleased)\n\n- First release.\n- Early: a.\n",
    )
    # a bump would skip 0.1.0, which was never released
    refused = release(repo, tool_env, "ppe-config", "minor")
    assert refused.returncode == 1
    assert "ppe-config 0.1.0 was never released" in refused.stderr
    assert "release.py ppe-config release" in refused.stderr
    assert git(repo, "status", "--porcelain") == ""

    result = release(repo, tool_env, "ppe-config", "release")
    assert result.returncode == 0, result.stderr
    assert "ppe-config: first release of 0.1.0" in result.stdout
    assert "tag: ppe-config-v0.1.0" in result.stdout
    assert version_of(repo, "ppe-config") == "0.1.0"
    assert (repo / "packages/ppe-config/CHANGELOG.md").read_text() == (
        "# Changelog of ppe-config\n\n## Unreleased\n\n## 0.1.0 (2031-02-03)\n\n"
        "- First release.\n- Early: a.\n- Later: b.\n"
    )


def test_refuses_a_dirty_working_tree_and_changes_nothing(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    (repo / "packages/ppe-core/README.md").write_text("edited\n")
    result = release(repo, tool_env, "ppe-core", "release")
    assert result.returncode == 1
    assert "the working tree is dirty" in result.stderr
    assert "packages/ppe-core/README.md" in result.stderr
    assert git(repo, "status", "--porcelain").split() == ["M", "packages/ppe-core/README.md"]


def test_refuses_when_the_changelog_has_nothing_unreleased(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    write_changelog(
        repo, "ppe-core", "# Changelog\n\n## Unreleased\n\n## 0.1.0 (2030-01-01)\n\n- First.\n"
    )
    result = release(repo, tool_env, "ppe-core", "micro")
    assert result.returncode == 1
    assert "has nothing unreleased" in result.stderr
    assert version_of(repo, "ppe-core") == "0.1.0"
    assert git(repo, "status", "--porcelain") == ""


def test_refuses_an_unknown_distribution_naming_the_known_ones(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    result = release(repo, tool_env, "ppe-nope", "minor")
    assert result.returncode == 1
    assert "unknown distribution 'ppe-nope'" in result.stderr
    assert "ppe-config, ppe-core, ppe-dataset" in result.stderr


def test_a_part_hatch_rejects_is_refused_with_hatch_s_reason(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    write_changelog(
        repo, "ppe-core", "# Changelog\n\n## Unreleased\n\n- A.\n\n## 0.1.0 (2030-01-01)\n"
    )
    result = release(repo, tool_env, "ppe-core", "0.0.9")
    assert result.returncode == 1
    assert "hatch version 0.0.9 failed" in result.stderr
    assert "not higher than the original version" in result.stderr
    assert git(repo, "status", "--porcelain") == ""


def test_the_meta_package_is_released_from_the_root_changelog(
    repo: pathlib.Path, tool_env: dict[str, str]
) -> None:
    before = (repo / "pyproject.toml").read_text()
    result = release(repo, tool_env, "pytorch-pfn-extras", "release")
    assert result.returncode == 0, result.stderr
    assert "pytorch-pfn-extras: first release of 1.0.0" in result.stdout
    assert "tag: pytorch-pfn-extras-v1.0.0" in result.stdout
    changelog = (repo / "CHANGELOG.md").read_text()
    assert "## Unreleased\n\n## 1.0.0 (2031-02-03)\n\n- First release" in changelog
    assert (repo / "pyproject.toml").read_text() == before  # its own ranges stay
    assert git(repo, "diff", "--name-only").split() == ["CHANGELOG.md"]
