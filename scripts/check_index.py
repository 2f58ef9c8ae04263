"""Prove the release side through a real package index, the way users and maintainers meet it.

Usage: ``python scripts/check_index.py --dist DIST --work WORK``

``DIST`` holds the wheels and sdists that ``scripts/check_wheels.py`` built from the tree;
``WORK`` is an empty scratch folder (everything this check writes, caches included, lands
there). The check starts pypiserver on 127.0.0.1 with no fallback to any other index, uploads
the artifacts with twine, and runs each scenario in fresh virtual environments that see only
that index and this machine's torch wheel:

1. ``pip install ppe-config`` installs ppe-config alone: no torch, no numpy.
2. ``pip install pytorch-pfn-extras`` on an index that also holds a stand-in PPE 0.9.0 installs
   the meta-package of the tree (not 0.9) and all six components at the tree's versions;
   ``python -m pytorch_pfn_extras`` lists them.
3. Releases made by ``scripts/release.py`` on a scratch copy of the repository (ppe-core
   0.1.x -> a patch and a minor release, ppe-dataset -> a patch release) are built with
   ``hatch build`` and uploaded. Pinning ``ppe-training==<tree>`` with ``ppe-core==<minor>.*``
   installs and trains; asking for ppe-training with the newer, incompatible ppe-core fails at
   resolution with pip's message naming the ranges.
4. ``pip install -U ppe-dataset`` in the environment of 2 changes ppe-dataset and nothing else.
5. Upgrading a PPE 0.9 environment (a stand-in wheel with the 147 paths of the real 0.9 wheel):
   ``pip install pytorch-pfn-extras`` leaves 0.9 whole; ``pip install -U pytorch-pfn-extras``
   ends either complete or with the import error naming the repair, and the repair command
   from that message makes it complete; the documented upgrade (uninstall 0.9 first) ends
   complete. Complete means every file each distribution's RECORD lists exists, and the API
   works.
6. Lowest supported versions: for every component, uv's ``lowest-direct`` resolution from the
   index picks the lowest release of our own distributions its ranges allow; the component's
   tests run against them wherever they differ from the tree's (which the isolated step
   tested), and always for ppe-runtime-cuda, so that the path stays exercised.

Each scenario prints what it checked and its time; a failed check stops with exit status 1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import email.parser
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from typing import TypeVar

import workspace
from local_index import (
    COMPONENTS,
    META,
    OURS,
    ROOT,
    TEST_TOOLS,
    WORKSPACE,
    CheckFailed,
    Index,
    expect,
    say,
)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

T = TypeVar("T")
# The paths that the real pytorch-pfn-extras 0.9.0 wheel installs.
PPE09_FILES = ROOT / "tests" / "release" / "data" / "ppe09_wheel_files.txt"


# ---------------------------------------------------------------------- artifacts


def build_ppe09_standin(work: pathlib.Path) -> pathlib.Path:
    """A pytorch-pfn-extras 0.9.0 wheel installing exactly the paths of the real 0.9 wheel."""
    paths = PPE09_FILES.read_text().split()
    project = work / "ppe09"
    for path in paths:
        file = project / path
        file.parent.mkdir(parents=True, exist_ok=True)
        if path == "pytorch_pfn_extras/__init__.py":
            file.write_text('__version__ = "0.9.0"\n')
        elif path.endswith((".py", ".pyi")):
            file.write_text(f'"""Stand-in for PPE 0.9.0\'s {path}."""\n')
        else:
            file.write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "pytorch-pfn-extras"\nversion = "0.9.0"\n'
        'description = "Stand-in for PPE 0.9.0 (its 147 installed paths)"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["pytorch_pfn_extras"]\n'
    )
    out = work / "ppe09-dist"
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
        cwd=project, check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = sorted(n for n in zf.namelist() if ".dist-info/" not in n)
    expect(
        shipped == sorted(paths),
        f"the 0.9 stand-in ships {len(shipped)} paths, expected {len(paths)}",
    )
    return wheel


def scratch_releases(index: Index) -> dict[str, list[str]]:
    """Release ppe-core (patch, then minor) and ppe-dataset (patch) on a scratch copy.

    Uses ``scripts/release.py`` of the copy as a maintainer would, commits each release in the
    copy's own git repository, and builds each released state with ``hatch build``. Returns the
    new versions per distribution, in release order; the artifacts land in ``WORK/releases``.
    """
    repo = index.work / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=check_index", "-c", "user.email=check_index@localhost"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HATCH_DATA_DIR=str(index.work / "cache" / "hatch"),
        UV_CACHE_DIR=str(index.work / "cache" / "uv"),
    )

    def run(*command: str, cwd: pathlib.Path = repo) -> str:
        return index.run(list(command), cwd=cwd, env=env).stdout

    run("git", "init", "-q")
    run(*git, "add", "-A")
    run(*git, "commit", "-q", "-m", "scratch copy")
    released: dict[str, list[str]] = {}
    out = index.work / "releases"
    for dist, part in (("ppe-core", "micro"), ("ppe-core", "minor"), ("ppe-dataset", "micro")):
        project = repo / "packages" / dist
        changelog = project / "CHANGELOG.md"
        version = index.versions[dist]
        if f"## {version} (unreleased)" in changelog.read_text():
            # the tree's version is itself unreleased: release it first, as a maintainer would
            run(sys.executable, "scripts/release.py", dist, "release")
            run(*git, "commit", "-q", "-am", f"{dist} {version}")
        text = changelog.read_text()
        entry = f"- Scratch {part} release made by scripts/check_index.py."
        text = text.replace("## Unreleased\n", f"## Unreleased\n\n{entry}\n", 1)
        changelog.write_text(text)
        run(*git, "commit", "-q", "-am", f"{dist}: a change")
        report = run(sys.executable, "scripts/release.py", dist, part)
        tag = re.search(rf"^tag: {dist}-v(\S+)$", report, flags=re.M)
        expect(tag is not None, f"release.py printed no tag:\n{report}")
        assert tag is not None
        new = tag.group(1)
        expect(
            f"{entry}" in changelog.read_text().split(f"## {new} (")[1],
            f"{changelog} lost the entry",
        )
        run(*git, "commit", "-q", "-am", f"{dist} {new}")
        run(*git, "tag", f"{dist}-v{new}")
        run(
            sys.executable,
            "-m",
            "hatch",
            "build",
            "-t",
            "wheel",
            "-t",
            "sdist",
            str(out),
            cwd=project,
        )
        released.setdefault(dist, []).append(new)
    return released


# ---------------------------------------------------------------------- scenarios


# Fails unless every file that the RECORD of each installed distribution of ours lists exists.
COMPLETE_CODE = (
    "import importlib.metadata as m, sys\n"
    f"ours = {sorted(OURS)!r}\n"
    "missing = [str(f) for d in m.distributions() if d.metadata['Name'] in ours"
    " for f in d.files or [] if not f.locate().exists()]\n"
    "sys.exit('missing: ' + ', '.join(missing)) if missing else None\n"
)


WORKING_CODE = (
    "import pytorch_pfn_extras as ppe, torch\n"
    "from pytorch_pfn_extras.dataset import TabularDataset\n"
    "from pytorch_pfn_extras.training import ExtensionsManager\n"
    "from pytorch_pfn_extras.config import Config\n"
    "assert ppe.__version__ == {version!r}, ppe.__version__\n"
    "assert Config({{'a': 1}})['/a'] == 1\n"
    "model = torch.nn.Linear(2, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=2, extensions=[])\n"
    "while not manager.stop_trigger:\n"
    "    with manager.run_iteration():\n"
    "        optimizer.zero_grad(); model(torch.ones(4, 2)).sum().backward(); optimizer.step()\n"
    "assert manager.iteration == 2\n"
)


def scenario_config_alone(index: Index) -> str:
    python = index.venv("config-alone")
    index.pip(python, "install", "-q", "ppe-config")
    installed = index.installed(python)
    expect(
        set(installed) == {"pip", "ppe-config"},
        f"`pip install ppe-config` installed {sorted(installed)}, expected ppe-config alone",
    )
    index.python_code(
        python,
        "import sys, pytorch_pfn_extras.config as c\n"
        "assert c.Config({'a': {'b': 2}})['/a/b'] == 2\n"
        "assert not {'torch', 'numpy'} & set(sys.modules), sorted(sys.modules)\n",
    )
    return f"ppe-config {installed['ppe-config']} alone (pip only besides it); it imports without torch/numpy"


def scenario_full_install(index: Index) -> str:
    python = index.venv("full", torch=True)
    index.pip(python, "install", "-q", META)
    installed = index.installed(python)
    for dist in OURS:
        expect(
            installed.get(dist) == index.versions[dist],
            f"`pip install {META}` (the index also holds {META} 0.9.0) gave {dist}"
            f" {installed.get(dist)}, expected the tree's {index.versions[dist]}",
        )
    index.pip(python, "check")
    report = index.run([str(python), "-m", "pytorch_pfn_extras"])
    listed = dict(
        line.split(None, 1) for line in report.stdout.splitlines() if line.startswith("  ")
    )
    for dist in OURS:
        expect(
            listed.get(dist, "").strip() == index.versions[dist],
            f"python -m pytorch_pfn_extras lists {dist} as {listed.get(dist)!r}:\n{report.stdout}",
        )
    index.python_code(python, WORKING_CODE.format(version=index.versions[META]))
    index.full_env = python
    return (
        f"{META} {installed[META]} chosen over 0.9.0; all six components at the tree's versions"
        f" with torch {installed['torch']}; pip check clean; python -m pytorch_pfn_extras lists them"
    )


def scenario_pinning(index: Index, released: dict[str, list[str]]) -> str:
    training = index.versions["ppe-training"]
    core = Version(index.versions["ppe-core"])
    patch, minor = released["ppe-core"]
    series = f"{core.major}.{core.minor}.*"
    python = index.venv("pinned", torch=True)
    index.pip(python, "install", "-q", f"ppe-training=={training}", f"ppe-core=={series}")
    installed = index.installed(python)
    expect(
        installed["ppe-core"] == patch,
        f"ppe-core=={series} installed {installed['ppe-core']}, expected the newest of the series, {patch}",
    )
    index.pip(python, "check")
    index.python_code(
        python,
        "import torch\nfrom pytorch_pfn_extras.training import ExtensionsManager\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "m = ExtensionsManager(model, opt, 1, iters_per_epoch=3, extensions=[])\n"
        "while not m.stop_trigger:\n    with m.run_iteration():\n        opt.zero_grad(); model(torch.ones(1, 2)).sum().backward(); opt.step()\n"
        "assert m.iteration == 3\n",
    )
    # Upgrading the pair together stays inside ppe-training's range; upgrading ppe-core alone
    # does not (pip does not weigh what is already installed): docs/versions.md says both.
    index.pip(python, "install", "-q", "-U", "ppe-core", "ppe-training")
    expect(
        index.installed(python)["ppe-core"] == patch,
        "`pip install -U ppe-core ppe-training` left the range",
    )
    alone = index.pip(python, "install", "-U", "ppe-core")
    expect(
        index.installed(python)["ppe-core"] == minor
        and f"ppe-training {training} requires ppe-core" in alone.stdout + alone.stderr,
        f"`pip install -U ppe-core` alone behaved otherwise than docs/versions.md says:\n{alone.stderr}",
    )
    fresh = index.venv("incompatible")  # fails at resolution: no torch needed
    result = index.pip(
        fresh, "install", f"ppe-training=={training}", f"ppe-core=={minor}", ok=False
    )
    output = result.stdout + result.stderr
    expect(
        result.returncode != 0,
        f"ppe-training {training} with ppe-core {minor} installed:\n{output}",
    )
    expect("ResolutionImpossible" in output, f"pip did not fail at resolution:\n{output}")
    depends = re.search(rf"ppe-training {re.escape(training)} depends on ppe-core([^\n]*)", output)
    expect(
        depends is not None and f"<{core.major}.{core.minor + 1}" in depends.group(1),
        f"pip's message does not name ppe-training's range on ppe-core:\n{output}",
    )
    assert depends is not None
    leftovers = sorted(set(index.installed(fresh)) & set(OURS))
    expect(not leftovers, f"the failed install left {leftovers} behind")
    return (
        f"ppe-training=={training} + ppe-core=={series} -> ppe-core {patch}, trains, pip check clean;"
        f" -U of both stays at {patch}, -U ppe-core alone takes {minor} with pip's conflict warning;"
        f" + ppe-core=={minor} -> ResolutionImpossible: 'ppe-training {training} depends on"
        f" ppe-core{depends.group(1).strip()}'"
    )


def scenario_upgrade_one(index: Index, released: dict[str, list[str]]) -> str:
    python = index.full_env
    expect(python is not None, "scenario 2 made no environment")
    assert python is not None
    before = index.installed(python)
    index.pip(python, "install", "-q", "-U", "ppe-dataset")
    after = index.installed(python)
    changed = sorted(d for d in before.keys() | after.keys() if before.get(d) != after.get(d))
    expect(
        changed == ["ppe-dataset"],
        f"`pip install -U ppe-dataset` changed {changed}, expected only ppe-dataset",
    )
    expect(
        after["ppe-dataset"] == released["ppe-dataset"][-1],
        f"ppe-dataset is {after['ppe-dataset']}",
    )
    index.pip(python, "check")
    index.python_code(python, WORKING_CODE.format(version=index.versions[META]))
    return f"ppe-dataset {before['ppe-dataset']} -> {after['ppe-dataset']}; the other {len(after) - 1} distributions unchanged; pip check clean"


def scenario_ppe09(index: Index) -> str:
    complete = COMPLETE_CODE
    working = WORKING_CODE.format(version=index.versions[META])
    notes = []

    python = index.venv("ppe09-upgrade", torch=True)
    index.pip(python, "install", "-q", f"{META}==0.9.0")
    index.pip(python, "install", "-q", META)
    expect(
        index.installed(python)[META] == "0.9.0", "`pip install pytorch-pfn-extras` replaced 0.9.0"
    )
    index.python_code(
        python, complete + "import pytorch_pfn_extras as p; assert p.__version__ == '0.9.0'"
    )
    notes.append("`pip install` keeps a complete 0.9.0")

    index.pip(python, "install", "-q", "-U", META)
    expect(
        index.installed(python)[META] == index.versions[META],
        "`pip install -U` did not upgrade the meta-package",
    )
    imported = index.python_code(python, "import pytorch_pfn_extras", ok=False)
    if imported.returncode == 0:
        index.python_code(python, complete + working)
        notes.append("`pip install -U` ends complete")
    else:
        error = imported.stderr
        repair = re.search(r"^    (pip install --force-reinstall --no-deps .+)$", error, flags=re.M)
        expect(
            "ImportError: pytorch_pfn_extras is installed incompletely" in error
            and repair is not None,
            f"after `pip install -U`, the import fails without naming the repair:\n{error}",
        )
        assert repair is not None
        expect(
            "pip uninstall -y pytorch-pfn-extras && pip install pytorch-pfn-extras" in error,
            f"the import error does not name the upgrade command:\n{error}",
        )
        broken = index.python_code(python, complete, ok=False)
        expect(broken.returncode != 0, "the import failed although every file exists")
        lost = len(broken.stderr.split(", "))
        index.pip(python, *repair.group(1).split()[1:])
        index.python_code(python, complete + working)
        index.pip(python, "check")
        notes.append(
            f"`pip install -U` loses {lost} files of the components; the import error names"
            f" `{repair.group(1)}`, which makes it complete and working"
        )

    python = index.venv("ppe09-documented", torch=True)
    index.pip(python, "install", "-q", f"{META}==0.9.0")
    index.pip(python, "uninstall", "-y", META)
    index.pip(python, "install", "-q", META)
    index.python_code(python, complete + working)
    index.pip(python, "check")
    notes.append(
        "the documented `pip uninstall -y pytorch-pfn-extras && pip install pytorch-pfn-extras` ends complete"
    )
    return "; ".join(notes)


def lowest_resolution(index: Index, dist: str, work: pathlib.Path) -> dict[str, str]:
    """uv's lowest-direct resolution of ``dist`` (at the tree's version) and its ranges on ours."""
    (wheel,) = index.dist.glob(f"{dist.replace('-', '_')}-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.BytesParser().parsebytes(zf.read(name))
    ranges = [
        raw for raw in metadata.get_all("Requires-Dist") or []
        if canonicalize_name(Requirement(raw).name) in OURS and "extra ==" not in raw
    ]  # fmt: skip
    requirements = work / f"{dist}.in"
    requirements.write_text(
        "\n".join([f"{dist}=={index.versions[dist]}", *ranges, index.torch_requirement]) + "\n"
    )
    compiled = index.uv(
        "pip", "compile", "-q", "--no-header", "--resolution", "lowest-direct",
        "--python", index.base_python, str(requirements),
    ).stdout  # fmt: skip
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", compiled, flags=re.M))
    for raw in ranges:
        requirement = Requirement(raw)
        available = [
            Version(str(parse_wheel_filename(w.name)[1]))
            for w in index.uploads.glob(f"{requirement.name.replace('-', '_')}-*.whl")
        ]
        lowest = min(v for v in available if requirement.specifier.contains(v))
        expect(
            Version(pins[requirement.name]) == lowest,
            f"lowest-direct gave {requirement.name} {pins[requirement.name]} for {dist} ({raw}); the lowest"
            f" release the range allows on the index is {lowest}",
        )
    return {n: v for n, v in pins.items() if n in OURS and n != dist}


def extras_for_tests(dist: str) -> dict[str, tuple[str, ...]]:
    """The extras of our distributions that ``dist``'s tests use, as in its isolated environment
    (workspace.toml): its own, and those of the distributions it needs."""
    component = WORKSPACE.components[dist]
    extras = dict(map(workspace.split_extras, component.needs))
    extras[dist] = component.isolated_extras
    return extras


def scenario_lowest(index: Index) -> str:
    work = index.work / "lowest"
    work.mkdir(exist_ok=True)
    notes = []
    for dist in COMPONENTS:
        lowest = lowest_resolution(index, dist, work)
        same = all(index.versions[n] == v for n, v in lowest.items())
        summary = ", ".join(f"{n} {v}" for n, v in sorted(lowest.items())) or "none of ours"
        # Where the lowest versions are the tree's, scripts/isolated.sh has run the tests against
        # these very wheels. ppe-runtime-cuda's (a few seconds) run here anyway, so that this
        # path is exercised on every run and not only once an old release differs.
        if same and dist != "ppe-runtime-cuda":
            notes.append(
                f"{dist}: lowest {summary} = the tree's, whose tests the isolated step runs"
            )
            continue
        python = index.venv(f"lowest-{dist}", torch=WORKSPACE.components[dist].torch)
        extras = extras_for_tests(dist)
        requirements = [
            f"{workspace.with_extras(n, extras.get(n, ()))}=={v}"
            for n, v in {**lowest, dist: index.versions[dist]}.items()
        ]
        index.uv("pip", "install", "-q", "--python", str(python), *requirements, *TEST_TOOLS)
        # A check of our lowest ranges, not of the real components (the S3 server, mpi4py are
        # not installed here): their tests may skip, even in CI, and are not counted (conftest.py)
        env = {k: v for k, v in index.env.items() if k != "PPE_REAL_COMPONENTS_DIR"}
        tests = index.run(
            [str(python), "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
             "-p", "no:cacheprovider", "-q", str(ROOT / "packages" / dist / "tests")],
            cwd=python.parent.parent,
            env={**env, "PPE_REQUIRE_REAL_COMPONENTS": "0"},
        )  # fmt: skip
        notes.append(f"{dist}: with {summary}: {tests.stdout.strip().splitlines()[-1]}")
    return "; ".join(notes)


# ---------------------------------------------------------------------- main


def timed(name: str, action: Callable[[], T]) -> T:
    """Run one step, then print its time and, for a scenario, what it checked."""
    say(f"-- {name}")
    start = time.monotonic()
    result = action()
    summary = f": {result}" if isinstance(result, str) else ""
    say(f"   ok in {time.monotonic() - start:.1f} s{summary}")
    return result


def timed_together(steps: list[tuple[str, Callable[[], str]]]) -> None:
    """Run independent scenarios two at a time (each in environments of its own; pip and uv
    wait on the disk and the index as much as on a core), and report them in order.

    Raises:
        CheckFailed: The first failure in order, once every scenario has ended.
    """

    def run(action: Callable[[], str]) -> tuple[str, float]:
        start = time.monotonic()
        return action(), time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = [(name, pool.submit(run, action)) for name, action in steps]
        for name, future in futures:
            say(f"-- {name}")
            result, seconds = future.result()  # a CheckFailed propagates after the others end
            say(f"   ok in {seconds:.1f} s: {result}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dist", required=True, type=pathlib.Path, help="wheels and sdists of the tree"
    )
    parser.add_argument("--work", required=True, type=pathlib.Path, help="an empty scratch folder")
    args = parser.parse_args()
    start = time.monotonic()
    try:
        index = Index(args.dist.resolve(), args.work.resolve())
        timed("third-party wheels for the index (versions of .venv)", index.fill_third_party)
        standin = timed(
            "stand-in pytorch-pfn-extras 0.9.0 wheel", lambda: build_ppe09_standin(index.work)
        )
        released = timed(
            "scratch releases: release.py, then hatch build", lambda: scratch_releases(index)
        )
        with index.serving():
            ours = sorted(index.dist.glob("*.whl")) + sorted(index.dist.glob("*.tar.gz"))
            timed(
                f"twine upload of the tree's {len(ours)} artifacts and the 0.9.0 stand-in to {index.url}",
                lambda: index.upload([*ours, standin]),
            )
            timed("1. pip install ppe-config", lambda: scenario_config_alone(index))
            timed("2. pip install pytorch-pfn-extras", lambda: scenario_full_install(index))
            newer = sorted((index.work / "releases").iterdir())
            wheels = ", ".join(f.name for f in newer if f.suffix == ".whl")
            timed(f"twine upload of the scratch releases ({wheels})", lambda: index.upload(newer))
            timed_together(
                [
                    (
                        "3. pinning ppe-training with ppe-core",
                        lambda: scenario_pinning(index, released),
                    ),
                    ("5. upgrading PPE 0.9 in place", lambda: scenario_ppe09(index)),
                    (
                        "4. pip install -U ppe-dataset",
                        lambda: scenario_upgrade_one(index, released),
                    ),
                    (
                        "6. lowest supported versions (uv lowest-direct)",
                        lambda: scenario_lowest(index),
                    ),
                ]
            )
    except CheckFailed as failure:
        say(f"FAILED: {failure}")
        return 1
    say(f"index scenarios: all passed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
