"""The version facts that docs/versions.md promises, read from the tree's pyproject files."""

from __future__ import annotations

import pathlib
import re

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECTS = {
    tomllib.loads(p.read_text())["project"]["name"]: p.parent
    for p in [ROOT / "pyproject.toml", *sorted(ROOT.glob("packages/*/pyproject.toml"))]
}
META = "pytorch-pfn-extras"
COMPONENTS = sorted(set(PROJECTS) - {META})
LAST_PPE = Version("0.9.0")
REPOSITORY = "https://github.com/pfnet/pytorch-pfn-extras"


def project_table(dist: str) -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((PROJECTS[dist] / "pyproject.toml").read_text())
    return table


def version(dist: str) -> Version:
    config = project_table(dist)["tool"]
    assert isinstance(config, dict)
    path = PROJECTS[dist] / config["hatch"]["version"]["path"]
    match = re.search(r'__version__ = "([^"]+)"', path.read_text())
    assert match is not None, path
    return Version(match.group(1))


def requirements(dist: str) -> list[Requirement]:
    project = project_table(dist)["project"]
    assert isinstance(project, dict)
    return [Requirement(r) for r in project.get("dependencies", [])]


def test_the_meta_package_version_is_a_final_release_above_ppe_0_9() -> None:
    # pip prefers it over 0.9.0 only as a final release: without --pre, pip takes a
    # pre-release such as 1.0.0.dev0 only when nothing else matches.
    meta = version(META)
    assert meta > LAST_PPE
    assert not meta.is_prerelease and not meta.is_devrelease


@pytest.mark.parametrize("dist", COMPONENTS)
def test_the_meta_package_pins_each_component_to_its_minor_series(dist: str) -> None:
    (requirement,) = [r for r in requirements(META) if r.name == dist]
    current = version(dist)
    major, minor = current.release[:2]
    assert str(requirement.specifier) in {
        f"<{major}.{minor + 1},>={major}.{minor}",
        f"<{major}.{minor + 1},>={current}",
    }
    assert requirement.specifier.contains(current, prereleases=True)


@pytest.mark.parametrize("dist", COMPONENTS)
def test_every_range_on_our_own_distributions_holds_the_tree_s_version(dist: str) -> None:
    ours = [r for r in requirements(dist) if r.name in PROJECTS]
    for requirement in ours:
        assert requirement.specifier.contains(version(requirement.name), prereleases=True), (
            f"{dist} requires {requirement}, but the tree has {version(requirement.name)}"
        )
        # a compatible range: a lower and an upper bound
        assert {s.operator for s in requirement.specifier} == {">=", "<"}, requirement


def test_every_extra_of_the_meta_package_names_an_extra_of_a_component() -> None:
    project = project_table(META)["project"]
    assert isinstance(project, dict)
    for extra, needs in project["optional-dependencies"].items():
        for raw in needs:
            requirement = Requirement(raw)
            component = project_table(requirement.name)["project"]
            assert isinstance(component, dict)
            assert requirement.extras <= set(component.get("optional-dependencies", {})), (
                f"{META}[{extra}] asks for {raw}, which {requirement.name} does not define"
            )


@pytest.mark.parametrize("dist", sorted(PROJECTS))
def test_project_urls_point_into_the_repository_at_files_that_exist(dist: str) -> None:
    project = project_table(dist)["project"]
    assert isinstance(project, dict)
    urls: dict[str, str] = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    if dist != META:
        assert "Changelog" in urls
    for label, url in urls.items():
        assert url.startswith(REPOSITORY), (label, url)
        path = re.match(rf"{REPOSITORY}/(?:blob|tree)/main/(.+)", url)
        if path is not None:
            assert (ROOT / path.group(1)).exists(), f"{dist}'s {label} URL names a missing {url}"
