"""Build every wheel and sdist of the monorepo with hatch and check what each one ships.

Pip silently lets one wheel overwrite another's file, so the namespace rules of
DESIGN.md are enforced here on the built artifacts:

- each component wheel ships only the subpackages it owns (and its dist-info);
- no two wheels share a path;
- only the meta wheel has files directly under ``pytorch_pfn_extras/``;
- every owned subpackage ships ``py.typed``.

And what a user of the package index relies on:

- the wheel that pip builds from the sdist equals the wheel built from the tree, file for
  file (no file forgotten in the sdist);
- the metadata names a summary, a license, the Python range, the torch range (where torch is
  needed), the project URLs, and carries the README as its long description; ``twine check
  --strict`` renders it.

Usage: ``python scripts/check_wheels.py --out dist`` (leaves every wheel and sdist in ``dist``).
"""

from __future__ import annotations

import argparse
import email.message
import email.parser
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parent.parent
# workspace.py lies beside this file (the tests load this file by its path: add the folder)
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
import workspace  # noqa: E402

WORKSPACE = workspace.load()
# The subpackages each distribution owns (workspace.toml); the meta-package owns only META_FILES.
OWNERS: dict[str, tuple[str, ...]] = {
    **{name: c.owns for name, c in WORKSPACE.components.items()},
    WORKSPACE.meta: (),
}
META_FILES = {"__init__.py", "__main__.py", "_version.py", "py.typed"}


# Distributions whose code imports torch: their metadata must declare a torch range.
NEEDS_TORCH = tuple(name for name, c in WORKSPACE.components.items() if c.torch)
METADATA_FIELDS = ("Summary", "License-Expression", "Requires-Python", "Description-Content-Type")
URL_LABELS = ("Homepage", "Documentation", "Source", "Issues")


def run(command: list[str], cwd: pathlib.Path, what: str) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        message = f"{what} failed:\n{result.stdout}{result.stderr}"
        raise SystemExit(message)


def build(dist: str, out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Build ``dist``'s wheel and sdist from the tree with ``hatch build``."""
    project = ROOT if dist == WORKSPACE.meta else WORKSPACE.components[dist].folder
    prefix = dist.replace("-", "_") + "-"
    for old in [*out.glob(prefix + "*.whl"), *out.glob(prefix + "*.tar.gz")]:
        old.unlink()
    command = [sys.executable, "-m", "hatch", "build", "-t", "wheel", "-t", "sdist", str(out)]
    run(command, project, f"building the {dist} wheel and sdist")
    (wheel,) = out.glob(prefix + "*.whl")
    (sdist,) = out.glob(prefix + "*.tar.gz")
    return wheel, sdist


def contents(wheel: pathlib.Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}


def wheel_from_sdist(sdist: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """Build a wheel from the unpacked sdist, with the build backend, as pip does."""
    with tarfile.open(sdist) as tf:
        tf.extractall(work / "src", filter="data")
    (tree,) = (work / "src").iterdir()
    run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(work / "out")],
        tree,
        f"building a wheel from {sdist.name}",
    )
    (wheel,) = (work / "out").glob("*.whl")
    return wheel


def sdist_problems(
    dist: str, from_tree: dict[str, bytes], from_sdist: dict[str, bytes]
) -> list[str]:
    """Compare the wheel built from the tree with the one built from the sdist."""
    problems = [
        f"{dist}: {name} is in the wheel built from the tree, not in the sdist's"
        for name in sorted(from_tree.keys() - from_sdist.keys())
    ]
    problems += [
        f"{dist}: {name} is only in the wheel built from the sdist"
        for name in sorted(from_sdist.keys() - from_tree.keys())
    ]
    problems += [
        f"{dist}: {name} differs between the wheel built from the tree and the sdist's"
        for name in sorted(from_tree.keys() & from_sdist.keys())
        if from_tree[name] != from_sdist[name]
    ]
    return problems


def metadata_problems(dist: str, metadata: email.message.Message) -> list[str]:
    """Name every piece of user-facing metadata that ``dist`` lacks."""
    problems = [
        f"{dist}: metadata has no {field}" for field in METADATA_FIELDS if not metadata.get(field)
    ]
    labels = {url.split(",")[0].strip() for url in metadata.get_all("Project-URL") or []}
    problems += [
        f"{dist}: metadata has no {label} URL" for label in URL_LABELS if label not in labels
    ]
    description = metadata.get_payload()
    if not (isinstance(description, str) and description.strip()):
        problems.append(f"{dist}: metadata has no long description (the README)")
    if dist in NEEDS_TORCH:
        torch = [
            Requirement(r)
            for r in metadata.get_all("Requires-Dist") or []
            if Requirement(r).name == "torch"
        ]
        if not any(s.operator in (">=", "~=", "==") for r in torch for s in r.specifier):
            problems.append(f"{dist}: metadata declares no lower bound for torch")
    return problems


def wheel_metadata(names: dict[str, bytes]) -> email.message.Message:
    (name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    return email.parser.BytesParser().parsebytes(names[name])


def problems_of(dist: str, names: list[str]) -> list[str]:
    problems = []
    owned = OWNERS[dist]
    for name in names:
        if ".dist-info/" in name:
            continue
        parts = name.split("/")
        if parts[0] != "pytorch_pfn_extras":
            problems.append(f"{dist}: {name} is outside pytorch_pfn_extras/")
        elif len(parts) == 2:
            if dist != WORKSPACE.meta:
                problems.append(f"{dist}: {name} lies directly under pytorch_pfn_extras/")
            elif parts[1] not in META_FILES:
                problems.append(f"{dist}: unexpected meta-package file {name}")
        elif parts[1] not in owned:
            problems.append(f"{dist}: {name} belongs to a subpackage it does not own")
    for sub in owned:
        if f"pytorch_pfn_extras/{sub}/py.typed" not in names:
            problems.append(f"{dist}: pytorch_pfn_extras/{sub}/py.typed is missing")
        if f"pytorch_pfn_extras/{sub}/__init__.py" not in names:
            problems.append(f"{dist}: pytorch_pfn_extras/{sub}/__init__.py is missing")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="dist", type=pathlib.Path)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    owner_of_path: dict[str, str] = {}
    problems: list[str] = []
    built: list[pathlib.Path] = []
    for dist in OWNERS:
        wheel, sdist = build(dist, out)
        built += [wheel, sdist]
        files = contents(wheel)
        names = list(files)
        problems += problems_of(dist, names)
        problems += metadata_problems(dist, wheel_metadata(files))
        with tempfile.TemporaryDirectory() as work:
            problems += sdist_problems(
                dist, files, contents(wheel_from_sdist(sdist, pathlib.Path(work)))
            )
        for name in names:
            if ".dist-info/" in name:
                continue
            if name in owner_of_path:
                problems.append(f"{name} is shipped by both {owner_of_path[name]} and {dist}")
            owner_of_path[name] = dist
        print(f"{wheel.name}: {len(names)} files; {sdist.name}: builds the same wheel")
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built)],
        capture_output=True,
        text=True,
        check=False,
    )
    if twine.returncode != 0:
        problems.append(f"twine check --strict failed:\n{twine.stdout}{twine.stderr}")
    else:
        print(f"twine check --strict: {len(built)} distributions pass")
    for problem in problems:
        print("ERROR:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
