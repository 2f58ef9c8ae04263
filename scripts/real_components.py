"""Sum up which real-component suites ran and which skipped, over every pytest run of a check.

Each pytest run of ``scripts/check.sh`` (every isolated environment, and the meta-package's run)
writes the counts of its tests of each real component (OpenMPI, Slurm, the S3 server, ignite...:
the table ``REAL_COMPONENTS`` of the root ``conftest.py``) as a JSON file into the folder given by
``PPE_REAL_COMPONENTS_DIR``; this prints them, one line per component and one per environment::

    python scripts/real_components.py DIR

Exit status 2 where the folder holds no counts or a file is not such counts. Standard library
only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from typing import Any

OUTCOMES = ("passed", "failed", "skipped")


class CountsError(Exception):
    """A file of counts is missing or not what the root conftest.py writes; says which."""


@dataclasses.dataclass
class Run:
    """One environment's tests of one component."""

    environment: str
    passed: int
    failed: int
    skipped: int
    failed_here: int  # of the skipped, those the run turned into failures (it required them)
    reasons: list[str]
    left_out: bool

    def describe(self) -> str:
        counts = ", ".join(f"{getattr(self, o)} {o}" for o in OUTCOMES if getattr(self, o))
        line = f"{self.environment}: {counts}"
        if self.failed_here:
            line += f" ({self.failed_here} of them failures: this run requires it)"
        if self.left_out:
            line += ", left out of this environment on purpose (workspace.toml)"
        return line


def read(folder: pathlib.Path) -> dict[str, list[Run]]:
    """The runs of each component, in the order of the table, from the JSON files of ``folder``."""
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        message = f"{folder} holds no counts (*.json): no pytest run wrote any"
        raise CountsError(message)
    runs: dict[str, list[Run]] = {}
    for file in files:
        try:
            data = json.loads(file.read_text())
            environment = str(data["environment"])
            components: dict[str, Any] = data["components"]
            for name, counts in components.items():
                run = Run(
                    environment=environment,
                    passed=int(counts["passed"]),
                    failed=int(counts["failed"]),
                    skipped=int(counts["skipped"]),
                    failed_here=int(counts["failed_here"]),
                    reasons=[str(r) for r in counts["reasons"]],
                    left_out=bool(counts["left_out"]),
                )
                runs.setdefault(name, [])
                if run.passed or run.failed or run.skipped:
                    runs[name].append(run)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            message = (
                f"{file}: not the counts the root conftest.py writes ({type(error).__name__}:"
                f" {error}); expected {{'environment': ..., 'components': {{name: {{'passed': n,"
                f" 'failed': n, 'skipped': n, 'failed_here': n, 'reasons': [...], 'left_out': bool}}}}}}"
            )
            raise CountsError(message) from error
    return runs


def verdict(runs: list[Run]) -> str:
    """``ran``, ``ran, some skipped``, ``SKIPPED``, ``MISSING`` (skips that a run requiring the
    component turned into failures), ``FAILED``, ``left out`` or ``no test``, over the
    environments that should have the component (one that leaves it out does not count)."""
    counted = [run for run in runs if not run.left_out]
    if runs and not counted:
        return "left out"
    passed, failed, skipped = (sum(getattr(r, o) for r in counted) for o in OUTCOMES)
    if any(run.failed_here for run in counted):
        return "MISSING"
    if failed:
        return "FAILED"
    if passed and skipped:
        return "ran, some skipped"
    if passed:
        return "ran"
    return "SKIPPED" if skipped else "no test"


def summary(runs: dict[str, list[Run]]) -> list[str]:
    """The lines to print: each component's verdict, its environments, the reasons of skips."""
    lines = ["real components: which suites ran and which skipped (tests per environment)"]
    verdicts = {name: verdict(component_runs) for name, component_runs in runs.items()}
    width = max(map(len, verdicts.values()))
    for name, component_runs in runs.items():
        lines.append(f"  {verdicts[name]:<{width}}  {name}")
        for run in component_runs:
            lines.append(f"  {'':<{width}}    {run.describe()}")
            lines += [f"  {'':<{width}}      skipped: {reason}" for reason in run.reasons]
    tally = {v: [n for n in runs if verdicts[n] == v] for v in dict.fromkeys(verdicts.values())}
    lines.append(
        "real components: "
        + "; ".join(f"{len(names)} {v}" + (f" ({', '.join(names)})" if v != "ran" else "")
                    for v, names in tally.items())
    )  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path, help="PPE_REAL_COMPONENTS_DIR of the runs")
    args = parser.parse_args(argv)
    try:
        lines = summary(read(args.folder))
    except CountsError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
