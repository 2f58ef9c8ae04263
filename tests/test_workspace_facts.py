"""One fact in one place: workspace.toml, and every copy that cannot read it kept equal to it.

workspace.toml holds the distributions (what each owns, the extras and the other distributions
its tests use), the torch pin and the test tools; scripts/workspace.py reads it for the scripts.
These tests fail where a copy creeps back into the scripts, or where what cannot read the file
(the hatch environments, the meta-package's metadata and code, the tool configuration,
docs/architecture.md) disagrees with it.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
import tomllib
from packaging.requirements import Requirement

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.__main__ as ppe_main

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def load_workspace_module() -> ModuleType:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module("workspace")


ws = load_workspace_module()
WORKSPACE = ws.load()
# Every requirement workspace.toml pins: torch, the test tools, the S3 server, mpi4py, and the
# components' test-requires.
FACTS = (
    WORKSPACE.torch,
    *WORKSPACE.test_tools,
    WORKSPACE.s3_server,
    WORKSPACE.mpi,
    *(r for c in WORKSPACE.components.values() for r in c.test_requires),
)


def pyproject(folder: pathlib.Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


# ---------------------------------------------------------------------- the distributions


def test_every_project_under_packages_is_a_component_of_workspace_toml_and_vice_versa() -> None:
    folders = {p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert folders == set(WORKSPACE.components)
    for name, component in WORKSPACE.components.items():
        assert pyproject(component.folder)["project"]["name"] == name
    assert pyproject(ROOT)["project"]["name"] == WORKSPACE.meta


def test_each_component_owns_exactly_the_subpackages_of_its_source_tree() -> None:
    for name, component in WORKSPACE.components.items():
        namespace = component.folder / "src" / "pytorch_pfn_extras"
        found = {p.name for p in namespace.iterdir() if (p / "__init__.py").is_file()}
        assert found == set(component.owns), name


def test_the_meta_package_requires_every_component_and_its_all_extra_is_the_workspace() -> None:
    project = pyproject(ROOT)["project"]
    ours = {Requirement(r).name for r in project["dependencies"]} - {"packaging"}
    assert ours == set(WORKSPACE.components)
    # `pip install pytorch-pfn-extras[all]` is the workspace environment: every component with
    # the extras its tests use.
    in_all = {
        Requirement(r).name: Requirement(r).extras for r in project["optional-dependencies"]["all"]
    }
    assert in_all == {n: set(c.extras) for n, c in WORKSPACE.components.items() if c.extras}


def test_every_component_extra_is_reachable_through_a_meta_package_extra() -> None:
    offered = {
        (Requirement(r).name, extra)
        for requirements in pyproject(ROOT)["project"]["optional-dependencies"].values()
        for r in requirements
        for extra in Requirement(r).extras
    }
    wanted = {
        (name, extra)
        for name, component in WORKSPACE.components.items()
        for extra in pyproject(component.folder)["project"].get("optional-dependencies", {})
    }
    assert wanted - offered == set()


def test_the_meta_packages_code_names_every_distribution() -> None:
    # Shipped code cannot read workspace.toml (it is not in any wheel): its lists are checked.
    assert set(ppe_main.COMPONENTS) == set(WORKSPACE.names)
    error = ppe._incomplete_install_error(  # the repair command when no owner is found
        [str(ROOT / "no-such-site" / "pytorch_pfn_extras" / "lost")]
    )
    repair = re.search(r"pip install --force-reinstall --no-deps (.+)\n", str(error))
    assert repair is not None
    assert set(repair.group(1).split()) == set(WORKSPACE.components)


def test_the_tool_configuration_names_every_component_folder() -> None:
    tools = pyproject(ROOT)["tool"]
    sources = {"src", *(f"packages/{name}/src" for name in WORKSPACE.components)}
    assert set(tools["mypy"]["files"]) == sources
    assert set(tools["mypy"]["mypy_path"]) == sources
    tests = {"tests", *(f"packages/{name}/tests" for name in WORKSPACE.components)}
    assert set(tools["pytest"]["ini_options"]["testpaths"]) == tests
    mkdocs = re.findall(r"^\s+- (packages/\S+/src)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert set(mkdocs) == sources - {"src"}


def architecture_table() -> dict[str, tuple[list[str], list[str]]]:
    """docs/architecture.md's "Who owns what": distribution -> (owned subpackages, extras)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Who owns what")[1].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("distribution", "---"):
            rows[cells[0]] = (
                re.findall(r"`([\w.]+)`", cells[1]),
                re.findall(r"`([\w-]+)`", cells[3]),
            )
    return rows


def test_the_architecture_table_lists_each_components_subpackages_and_extras() -> None:
    table = architecture_table()
    assert set(table) == set(WORKSPACE.names)
    for name, component in WORKSPACE.components.items():
        owns, extras = table[name]
        assert owns == list(component.owns), name
        assert extras == list(
            pyproject(component.folder)["project"].get("optional-dependencies", {})
        ), name


# ---------------------------------------------------------------------- torch and the test tools


def scanned_files() -> list[pathlib.Path]:
    """The files where a pin could be written: scripts, requirements, projects, CI, docs."""
    files = [
        *SCRIPTS.iterdir(),
        *ROOT.glob("requirements*.txt"),
        ROOT / "Makefile",
        *(ROOT / ".ci").iterdir(),
        ROOT / "pyproject.toml",
        *ROOT.glob("packages/*/pyproject.toml"),
        ROOT / "README.md",
        *ROOT.glob("packages/*/README.md"),
        *(ROOT / "docs").glob("**/*.md"),
    ]
    return [f for f in files if f.is_file() and f.suffix != ".pyc"]


def pinned(text: str) -> list[str]:
    """Every requirement in ``text`` on torch (``==``) or a test tool or test-requires (any
    version specifier)."""
    names = [Requirement(r).name for r in FACTS if Requirement(r).name != "torch"]
    tools = "|".join(
        re.escape(n) + r"(?:\[[\w,-]+\])?" for n in sorted(names, key=len, reverse=True)
    )
    # a version follows the operator: f"torch=={version}" computes one, it pins nothing
    pattern = rf"(?<![\w.-])(?:torch==|(?:{tools})\s*(?:[=<>!~]=|[<>]))\d[^\s\"'`)]*"
    return re.findall(pattern, text)


def test_pinned_finds_torch_pins_and_tool_requirements_but_not_ranges_or_prose() -> None:
    text = (
        'torch>=2.1 "torch==1.2.3" pytest -n 2 pytest-xdist==3.8.0 `moto[server]==5.2.5` mpi4py>=4,<5'
        ' f"torch=={version}" "hypothesis >=6" pytorch==1.0'
    )
    assert pinned(text) == [
        "torch==1.2.3",
        "pytest-xdist==3.8.0",
        "moto[server]==5.2.5",
        "mpi4py>=4,<5",
        "hypothesis >=6",
    ]


def test_no_script_or_requirements_file_pins_torch_or_a_test_tool() -> None:
    for file in scanned_files():
        if file.parent == SCRIPTS or file.name.startswith("requirements"):
            assert pinned(file.read_text()) == [], f"{file}: read workspace.toml instead"


def test_every_other_pin_of_torch_or_a_test_tool_is_workspace_tomls() -> None:
    facts = {Requirement(r).name: r for r in FACTS}
    found = 0
    for file in scanned_files():
        for requirement in pinned(file.read_text()):
            found += 1
            assert requirement == facts[Requirement(requirement).name], f"{file}: {requirement}"
    assert found > 0  # the hatch environments and the README have some


# ---------------------------------------------------------------------- hatch's environments


def member(path: str, features: tuple[str, ...] | list[str]) -> tuple[str, tuple[str, ...]]:
    return (path, tuple(features))


def members_of(environment: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    listed = environment.get("workspace", {}).get("members", [])
    return [
        member(m, ()) if isinstance(m, str) else member(m["path"], m.get("features", []))
        for m in listed
    ]


def fact_requirements(requirements: list[str]) -> list[str]:
    """Those of ``requirements`` on torch, the test tools, the S3 server, mpi4py or the
    test-requires."""
    names = {Requirement(r).name for r in FACTS}
    return [r for r in requirements if Requirement(r).name in names]


@pytest.fixture(scope="module")
def hatch_environments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The root project's hatch environments as hatch resolves them (templates inherited)."""
    scratch = tmp_path_factory.mktemp("hatch")
    shown = subprocess.run(
        [sys.executable, "-m", "hatch", "env", "show", "--json"],
        cwd=ROOT,
        env={**os.environ, "HATCH_DATA_DIR": str(scratch), "HATCH_CACHE_DIR": str(scratch)},
        capture_output=True,
        text=True,
        check=True,
    )
    environments: dict[str, Any] = json.loads(shown.stdout)
    return environments


def installs(environment: dict[str, Any]) -> list[str]:
    """What ``environment`` installs of torch, the test tools, the S3 server, mpi4py and the
    test-requires."""
    requirements = [
        *environment.get("dependencies", []),
        *environment.get("extra-dependencies", []),
    ]
    return sorted(fact_requirements(requirements))


def test_hatchs_environments_are_workspace_tomls(hatch_environments: dict[str, Any]) -> None:
    tools = list(WORKSPACE.test_tools)
    # `all` is the workspace environment (scripts/bootstrap.sh)
    everything = hatch_environments["all"]
    assert sorted(members_of(everything)) == sorted(
        member(f"packages/{name}", c.extras) for name, c in WORKSPACE.components.items()
    )
    test_requires = [r for c in WORKSPACE.components.values() for r in c.test_requires]
    assert installs(everything) == sorted(
        [*tools, WORKSPACE.torch, WORKSPACE.s3_server, *test_requires]
    )
    # the others: one per component, its isolated environment (scripts/isolated.sh) but mpi4py
    by_component = {}
    for env_name, environment in hatch_environments.items():
        # hatch shows a script as a list of commands, without `{args}`
        script = " && ".join(environment.get("scripts", {}).get("test", []))
        match = re.fullmatch(r"pytest packages/([\w-]+)/tests", script)
        if match:
            by_component[match.group(1)] = env_name
    assert set(by_component) == set(WORKSPACE.components)
    for name, env_name in by_component.items():
        component = WORKSPACE.components[name]
        environment = hatch_environments[env_name]
        expected = [member(f"packages/{n}", e) for n, e in map(ws.split_extras, component.needs)]
        expected.append(member(f"packages/{name}", component.isolated_extras))
        assert members_of(environment) == expected, env_name
        wanted = [*tools, *[WORKSPACE.torch] * component.torch]
        wanted += [WORKSPACE.s3_server] * component.s3_server
        wanted += component.test_requires
        assert installs(environment) == sorted(wanted), env_name


# ---------------------------------------------------------------------- scripts/workspace.py

EXAMPLE = """
torch = "torch==9.9"
test-tools = ["pytest==1.0"]
s3-server = "moto[server]==2.0"
mpi = "mpi4py>=4,<5"
[meta]
name = "meta"
[components.top]
owns = ["top"]
torch = true
extras = ["a", "b", "c"]
isolated-without = ["b"]
needs = ["base[x]"]
test-requires = ["kernel==3.0"]
s3-server = true
mpi = true
workers = 2
[components.base]
owns = ["base"]
torch = false
extras = ["x"]
"""


@pytest.fixture
def dist(tmp_path: pathlib.Path) -> pathlib.Path:
    for wheel in ("top-0.1.0-py3-none-any.whl", "base-0.2.0-py3-none-any.whl"):
        (tmp_path / wheel).touch()
    return tmp_path


def test_an_isolated_environment_has_the_wheels_extras_torch_servers_and_tools(
    dist: pathlib.Path,
) -> None:
    example = ws.parse(EXAMPLE)
    assert example.isolated_requirements("top", dist, mpi_available=True) == [
        f"{dist}/base-0.2.0-py3-none-any.whl[x]",
        f"{dist}/top-0.1.0-py3-none-any.whl[a,c]",
        "torch==9.9",
        "moto[server]==2.0",
        "mpi4py>=4,<5",
        "kernel==3.0",
        "pytest==1.0",
    ]
    assert "mpi4py>=4,<5" not in example.isolated_requirements("top", dist, mpi_available=False)
    # torch-free: no torch, no S3 server, no test-requires; no extras left out
    assert example.isolated_requirements("base", dist) == [
        f"{dist}/base-0.2.0-py3-none-any.whl[x]",
        "pytest==1.0",
    ]


def test_the_workspace_environment_installs_every_extra_and_the_meta_comes_last() -> None:
    example = ws.parse(EXAMPLE)
    assert example.editables() == ["packages/top[a,b,c]", "packages/base[x]"]
    assert example.dev_requirements() == ["pytest==1.0", "moto[server]==2.0", "kernel==3.0"]
    assert example.names == ("top", "base", "meta")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("workers = 2", "wrokers = 2"), "[components.top] has unknown keys ['wrokers']"),
        (
            ('isolated-without = ["b"]', 'isolated-without = ["z"]'),
            "isolated-without names ['z'], not in its extras",
        ),
        (
            ('needs = ["base[x]"]', 'needs = ["nope"]'),
            "needs 'nope', which is not a component (top, base)",
        ),
        (("torch = false", "torch = 0"), "[components.base] torch must be a bool, got 0"),
        (("workers = 2", "workers = true"), "workers must be a int, got True"),
        (
            ('test-requires = ["kernel==3.0"]', 'test-requires = "kernel==3.0"'),
            "[components.top] test-requires must be a list of strings, got 'kernel==3.0'",
        ),
        (('torch = "torch==9.9"', ""), "torch must be a str, got None"),
    ],
)
def test_a_wrong_workspace_toml_is_refused_naming_the_key(
    change: tuple[str, str], message: str
) -> None:
    with pytest.raises(ws.WorkspaceError) as error:
        ws.parse(EXAMPLE.replace(*change, 1))
    assert message in str(error.value)


def test_a_missing_or_ambiguous_wheel_is_refused(dist: pathlib.Path) -> None:
    example = ws.parse(EXAMPLE)
    (dist / "top-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(ws.WorkspaceError, match=r"holds 0 wheels of top, expected one"):
        example.isolated_requirements("top", dist)
    (dist / "base-0.3.0-py3-none-any.whl").touch()
    with pytest.raises(ws.WorkspaceError, match=r"holds 2 wheels of base, expected one"):
        example.isolated_requirements("base", dist)


def workspace_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "workspace.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_command_line_prints_one_item_per_line(dist: pathlib.Path) -> None:
    assert workspace_cli("names").stdout.splitlines() == list(WORKSPACE.components)
    assert workspace_cli("torch").stdout == WORKSPACE.torch + "\n"
    name = next(iter(WORKSPACE.components))
    for wheel in dist.iterdir():
        wheel.unlink()
    for other in WORKSPACE.components:
        (dist / f"{other.replace('-', '_')}-0.1.0-py3-none-any.whl").touch()
    listed = workspace_cli("requirements", name, "--dist", str(dist)).stdout.splitlines()
    assert listed == WORKSPACE.isolated_requirements(name, dist)
    assert workspace_cli("workers", name).stdout.strip() == str(WORKSPACE.components[name].workers)
    for other, component in WORKSPACE.components.items():
        listed = workspace_cli("isolated-without", other).stdout.splitlines()
        assert listed == list(component.isolated_without), other
    free = [n for n, c in WORKSPACE.components.items() if not c.torch]
    assert [
        n for n in WORKSPACE.components if workspace_cli("torch-free", n).stdout == "yes\n"
    ] == free


def test_the_command_line_refuses_an_unknown_component_with_status_2() -> None:
    result = workspace_cli("workers", "ppe-nothing")
    assert result.returncode == 2
    assert "unknown component 'ppe-nothing'; workspace.toml has ppe-" in result.stderr


def test_no_script_spells_out_the_list_of_components() -> None:
    # A list, one name a line or all on one: five or more names of components within 7 lines
    # (prose, such as check_index.py's scenarios, names fewer).
    names = re.compile(
        "|".join(sorted(map(re.escape, WORKSPACE.components), key=len, reverse=True))
    )
    for file in SCRIPTS.iterdir():
        if not file.is_file() or file.suffix == ".pyc":
            continue
        lines = file.read_text().splitlines()
        for start in range(len(lines)):
            window = "\n".join(lines[start : start + 7])
            found = set(names.findall(window))
            assert len(found) < 5, f"{file}:{start + 1} lists {sorted(found)}: read workspace.toml"


def test_the_environments_of_the_notebook_test_have_a_jupyter_kernel(dist: pathlib.Path) -> None:
    # test_notebook_kernel.py skips without them (the `notebook` extra brings ipywidgets only):
    # ppe-training's isolated environment, where it runs, and .venv must install them.
    for wheel in dist.iterdir():
        wheel.unlink()
    for name in WORKSPACE.components:
        (dist / f"{name.replace('-', '_')}-0.1.0-py3-none-any.whl").touch()
    kernel = {"nbclient", "nbformat", "ipykernel"}
    isolated = WORKSPACE.isolated_requirements("ppe-training", dist)
    assert kernel <= {Requirement(r).name for r in isolated[2:]}  # after the two wheels
    assert kernel <= {Requirement(r).name for r in WORKSPACE.dev_requirements()}
    # a test requirement, never one of the wheel's
    metadata = pyproject(WORKSPACE.components["ppe-training"].folder)["project"]
    extras = metadata["optional-dependencies"].values()
    declared = [*metadata["dependencies"], *(r for requirements in extras for r in requirements)]
    assert kernel.isdisjoint(Requirement(r).name for r in declared)
