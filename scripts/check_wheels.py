"""Build every wheel of the monorepo and check what each one ships.

Pip silently lets one wheel overwrite another's file, so the namespace rules of
DESIGN.md are enforced here on the built artifacts:

- each component wheel ships only the subpackages it owns (and its dist-info);
- no two wheels share a path;
- only the meta wheel has files directly under ``pytorch_pfn_extras/``;
- every owned subpackage ships ``py.typed``.

Usage: ``python scripts/check_wheels.py --out dist``
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OWNERS: dict[str, tuple[str, ...]] = {
    "ppe-core": (
        "reporting",
        "writing",
        "logging",
        "profiler",
        "runtime",
        "nn",
        "interop",
        "ops",
        "torchscript",
        "testing",
    ),
    "ppe-training": ("training", "engine", "handler", "distributed", "utils"),
    "ppe-runtime-cuda": ("cuda",),
    "ppe-onnx": ("onnx",),
    "ppe-config": ("config", "config_types"),
    "ppe-dataset": ("dataset", "dataloaders"),
    "pytorch-pfn-extras": (),
}
META_FILES = {"__init__.py", "__main__.py", "_version.py", "py.typed"}


def build(dist: str, out: pathlib.Path) -> pathlib.Path:
    project = ROOT if dist == "pytorch-pfn-extras" else ROOT / "packages" / dist
    prefix = dist.replace("-", "_") + "-"
    for old in out.glob(prefix + "*.whl"):
        old.unlink()
    result = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        message = f"building the {dist} wheel failed:\n{result.stdout}{result.stderr}"
        raise SystemExit(message)
    (wheel,) = out.glob(prefix + "*.whl")
    return wheel


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
            if dist != "pytorch-pfn-extras":
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
    for dist in OWNERS:
        wheel = build(dist, out)
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
        problems += problems_of(dist, names)
        for name in names:
            if ".dist-info/" in name:
                continue
            if name in owner_of_path:
                problems.append(f"{name} is shipped by both {owner_of_path[name]} and {dist}")
            owner_of_path[name] = dist
        print(f"{wheel.name}: {len(names)} files")
    for problem in problems:
        print("ERROR:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
