"""Release one distribution of the monorepo: bump it, date its changelog, keep the meta's range.

Usage: ``python scripts/release.py DIST PART [--date YYYY-MM-DD]``

- ``DIST`` is a distribution name (``ppe-core`` ... ``ppe-dataset``, ``pytorch-pfn-extras``).
- ``PART`` is what ``hatch version`` takes: ``major``, ``minor``, ``micro`` (``patch``,
  ``fix``), ``a``, ``b``, ``rc``, ``post``, ``dev``, ``release``, or an explicit version. A
  version whose changelog heading still says ``(unreleased)`` (the first release, ``## 0.1.0
  (unreleased)``) is released as it is with ``release`` (or the version itself).

What it does, in order, and nothing else (it commits and tags nothing):

1. refuses when the git working tree is dirty, when the changelog has nothing unreleased, or
   when the bump would skip a version that was never released;
2. ``hatch version PART`` inside the distribution's folder (only that distribution changes);
3. moves the changelog's ``## Unreleased`` section under ``## <version> (<date>)`` and leaves an
   empty ``## Unreleased`` above it;
4. when the new version leaves the meta-package's range for that component, rewrites the range
   in the root ``pyproject.toml`` to the new minor series (``>=0.2,<0.3``), and warns about every
   other component whose declared range now excludes it;
5. prints the tag to create, ``<dist>-v<version>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import re
import subprocess
import sys

import tomllib
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
META = "pytorch-pfn-extras"
UNRELEASED = "## Unreleased"


class ReleaseError(Exception):
    """A reason to refuse the release; the message says what to do."""


def distributions(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Map every distribution name of the repository to its project folder."""
    found = {}
    for pyproject in [root / "pyproject.toml", *sorted(root.glob("packages/*/pyproject.toml"))]:
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        found[name] = pyproject.parent
    return found


def dependencies_of(project: pathlib.Path) -> list[str]:
    """The requirement strings of ``[project] dependencies``, as written."""
    text = (project / "pyproject.toml").read_text()
    dependencies: list[str] = tomllib.loads(text)["project"].get("dependencies", [])
    return dependencies


def hatch(project: pathlib.Path, *args: str) -> str:
    """Run ``hatch`` (from this interpreter's environment) in ``project``; return its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "hatch", *args],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        message = f"hatch {' '.join(args)} failed in {project}:\n{result.stdout}{result.stderr}"
        raise ReleaseError(message)
    return result.stdout


def read_version(project: pathlib.Path) -> Version:
    """The project's version, as ``hatch version`` prints it (its last line of output)."""
    lines = hatch(project, "version").strip().splitlines()
    if not lines:
        message = f"hatch version printed no version in {project}"
        raise ReleaseError(message)
    return Version(lines[-1])


def check_clean(root: pathlib.Path) -> None:
    result = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        message = f"{root} is not a git working tree (git status: {result.stderr.strip()})"
        raise ReleaseError(message)
    if result.stdout.strip():
        message = (
            "the working tree is dirty; commit or stash these first, so that the release commit"
            f" holds the release alone:\n{result.stdout.rstrip()}"
        )
        raise ReleaseError(message)


@dataclasses.dataclass
class Changelog:
    """A CHANGELOG.md as its preamble and its ``## `` sections (heading line, body)."""

    preamble: str
    sections: list[tuple[str, str]]

    @classmethod
    def parse(cls, text: str) -> Changelog:
        parts = re.split(r"^(## .*)$", text, flags=re.M)
        bodies = parts[2::2]
        return cls(parts[0], list(zip(parts[1::2], bodies)))

    def render(self) -> str:
        return self.preamble + "".join(heading + body for heading, body in self.sections)

    def find(self, heading: str) -> int | None:
        for i, (line, _) in enumerate(self.sections):
            if line.strip().lower() == heading.lower():
                return i
        return None

    def body(self, heading: str) -> str:
        i = self.find(heading)
        return "" if i is None else self.sections[i][1].strip()

    def release(self, pending: str | None, new: str, date: str) -> None:
        """Put the unreleased entries (and the pending version's) under ``## new (date)``."""
        entries = [self.body(pending) if pending else "", self.body(UNRELEASED)]
        released = (f"## {new} ({date})", "\n\n" + "\n".join(e for e in entries if e) + "\n\n")
        kept = [
            s for s in self.sections if s[0].strip().lower() not in {UNRELEASED.lower(), pending}
        ]
        self.sections = [(UNRELEASED, "\n\n"), released, *kept]
        self.sections[-1] = (self.sections[-1][0], self.sections[-1][1].rstrip("\n") + "\n")


def minor_series(version: Version) -> str:
    """The compatible range of ``version``'s minor series, e.g. ``>=0.2,<0.3``."""
    major, minor = (*version.release, 0)[:2]
    floor = Version(f"{major}.{minor}")
    lower = f"{major}.{minor}" if version >= floor else str(version)
    return f">={lower},<{major}.{minor + 1}"


def update_meta_range(root: pathlib.Path, dist: str, new: Version) -> str | None:
    """Rewrite the meta-package's requirement on ``dist`` when it excludes ``new``.

    Returns a line describing the change, or ``None`` when the range still holds.
    """
    path = root / "pyproject.toml"
    text = path.read_text()
    for raw in dependencies_of(root):
        requirement = Requirement(raw)
        if requirement.name != dist:
            continue
        if requirement.specifier.contains(new, prereleases=True):
            return None
        updated = f"{dist}{minor_series(new)}"
        path.write_text(text.replace(f'"{raw}"', f'"{updated}"', 1))
        return (
            f"pyproject.toml: the meta-package now requires {updated} (was {raw});"
            f" release {META} too"
        )
    message = f"the meta-package in {path} does not require {dist}"
    raise ReleaseError(message)


def stale_dependents(root: pathlib.Path, dist: str, new: Version) -> list[str]:
    """Name every other component whose declared range on ``dist`` excludes ``new``."""
    warnings = []
    for name, project in distributions(root).items():
        if name == META:
            continue
        for raw in dependencies_of(project):
            requirement = Requirement(raw)
            if requirement.name == dist and not requirement.specifier.contains(
                new, prereleases=True
            ):
                warnings.append(
                    f"warning: {name} requires {raw}, which excludes {new}: widen it"
                    " once its tests pass with it (the workspace environment cannot resolve"
                    " until then)"
                )
    return warnings


def release(root: pathlib.Path, dist: str, part: str, date: str) -> list[str]:
    """Do the release and return the report lines; raise ``ReleaseError`` to refuse."""
    projects = distributions(root)
    if dist not in projects:
        message = f"unknown distribution {dist!r}; expected one of {', '.join(sorted(projects))}"
        raise ReleaseError(message)
    project = projects[dist]
    changelog_path = project / "CHANGELOG.md"
    if not changelog_path.is_file():
        message = f"{dist} has no changelog at {changelog_path}"
        raise ReleaseError(message)
    check_clean(root)

    current = read_version(project)
    changelog = Changelog.parse(changelog_path.read_text())
    pending_heading = f"## {current} (unreleased)"
    pending = pending_heading.lower() if changelog.find(pending_heading) is not None else None
    keeps_version = part == str(current) or (part == "release" and not current.is_prerelease)
    if pending is not None and not keeps_version:
        message = (
            f"{dist} {current} was never released (its changelog heading says '(unreleased)'):"
            f" release it first with `release.py {dist} release`"
        )
        raise ReleaseError(message)
    if keeps_version and pending is None:
        message = f"{dist} {current} is already released; PART must bump it"
        raise ReleaseError(message)
    if not changelog.body(UNRELEASED) and not (pending and changelog.body(pending_heading)):
        message = (
            f"{changelog_path} has nothing unreleased: write the changes under '{UNRELEASED}' first"
        )
        raise ReleaseError(message)

    if keeps_version:
        new = current
    else:
        hatch(project, "version", part)
        new = read_version(project)
    changelog.release(pending, str(new), date)
    changelog_path.write_text(changelog.render())

    where = project.relative_to(root)
    report = [
        f"{dist}: {current} -> {new}" if new != current else f"{dist}: first release of {new}",
        f"  {where / 'CHANGELOG.md'}: the unreleased entries are now '## {new} ({date})'",
    ]
    if dist != META:
        meta_change = update_meta_range(root, dist, new)
        if meta_change is not None:
            report.append(f"  {meta_change}")
        report.extend(stale_dependents(root, dist, new))
    tag = f"{dist}-v{new}"
    report += [
        "next: review the diff, then",
        f'  git commit -am "{dist} {new}" && git tag {tag}',
        f"tag: {tag}",
    ]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", help="distribution to release, e.g. ppe-core")
    parser.add_argument("part", help="what `hatch version` takes: major, minor, micro, rc, ...")
    parser.add_argument(
        "--date",
        default=datetime.date.today().isoformat(),
        help="release date written to the changelog (default: today, YYYY-MM-DD)",
    )
    args = parser.parse_args(argv)
    try:
        datetime.date.fromisoformat(args.date)
    except ValueError:
        parser.error(f"--date must be YYYY-MM-DD, got {args.date!r}")
    try:
        lines = release(ROOT, args.dist, args.part, args.date)
    except (ReleaseError, InvalidVersion) as error:
        print(f"release.py: refused: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
