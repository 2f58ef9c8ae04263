"""Read workspace.toml, the one place of the facts that several scripts share.

Python scripts import it (``workspace.load()``); shell scripts call its command line, which prints
one item per line::

    python scripts/workspace.py names                  # the components, in workspace.toml's order
    python scripts/workspace.py torch                  # the torch requirement
    python scripts/workspace.py mpi                    # the mpi4py requirement of the mpi tests
    python scripts/workspace.py dev-requirements       # .venv's test tools, S3 server, test-requires
    python scripts/workspace.py editables              # .venv's components: packages/<name>[extras]
    python scripts/workspace.py requirements ppe-core --dist DIST   # ppe-core's isolated environment
    python scripts/workspace.py workers ppe-core       # pytest-xdist workers of its isolated run
    python scripts/workspace.py torch-free ppe-config  # "yes" or "no"
    python scripts/workspace.py isolated-without ppe-config  # extras its isolated env leaves out

Standard library only: scripts/bootstrap.sh runs it before any environment exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import shutil
import sys
from typing import Any

import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILE = ROOT / "workspace.toml"
TOP_KEYS = {"torch", "test-tools", "s3-server", "mpi", "meta", "components"}
COMPONENT_KEYS = {
    "owns", "torch", "extras", "isolated-without", "needs", "test-requires", "s3-server", "mpi",
    "workers",
}  # fmt: skip
# `name` or `name[extra,extra]`: the form of `needs`
NAME_WITH_EXTRAS = re.compile(r"^([A-Za-z0-9._-]+)(?:\[([A-Za-z0-9._,-]*)\])?$")


class WorkspaceError(Exception):
    """workspace.toml, or a question asked of it, is wrong; the message says where."""


def with_extras(name: str, extras: tuple[str, ...]) -> str:
    """``name[a,b]``, or ``name`` without extras."""
    return f"{name}[{','.join(extras)}]" if extras else name


def split_extras(requirement: str) -> tuple[str, tuple[str, ...]]:
    """The name and the extras of ``name[a,b]``."""
    match = NAME_WITH_EXTRAS.match(requirement)
    if match is None:
        message = f"{requirement!r} is not a distribution name with optional [extras]"
        raise WorkspaceError(message)
    extras = tuple(e for e in (match.group(2) or "").split(",") if e)
    return match.group(1), extras


@dataclasses.dataclass(frozen=True)
class Component:
    """One component distribution, as workspace.toml describes it (see the comments there)."""

    name: str
    owns: tuple[str, ...]
    torch: bool
    extras: tuple[str, ...] = ()
    isolated_without: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    test_requires: tuple[str, ...] = ()
    s3_server: bool = False
    mpi: bool = False
    workers: int = 1

    @property
    def folder(self) -> pathlib.Path:
        return ROOT / "packages" / self.name

    @property
    def isolated_extras(self) -> tuple[str, ...]:
        """The extras of its own isolated environment."""
        return tuple(e for e in self.extras if e not in self.isolated_without)


@dataclasses.dataclass(frozen=True)
class Workspace:
    torch: str
    test_tools: tuple[str, ...]
    s3_server: str
    mpi: str
    meta: str
    components: dict[str, Component]

    def component(self, name: str) -> Component:
        if name not in self.components:
            message = f"unknown component {name!r}; workspace.toml has {', '.join(self.components)}"
            raise WorkspaceError(message)
        return self.components[name]

    @property
    def names(self) -> tuple[str, ...]:
        """Every distribution of ours: the components, then the meta-package."""
        return (*self.components, self.meta)

    def dev_requirements(self) -> list[str]:
        """The test tools, the S3 server and every component's ``test-requires`` (once each):
        what the workspace environment (.venv) installs besides the components and torch."""
        wanted = [*self.test_tools, self.s3_server]
        for component in self.components.values():
            wanted += [r for r in component.test_requires if r not in wanted]
        return wanted

    def editables(self) -> list[str]:
        """``packages/<name>[extras]`` of every component, as .venv installs them (editable)."""
        return [
            with_extras(str(c.folder.relative_to(ROOT)), c.extras) for c in self.components.values()
        ]

    def isolated_requirements(
        self, name: str, dist: pathlib.Path, *, mpi_available: bool | None = None
    ) -> list[str]:
        """What ``name``'s isolated environment installs: the wheels in ``dist`` of it and of
        what it needs (with extras), torch, the S3 server, mpi4py where OpenMPI is installed,
        its ``test-requires`` and the test tools."""
        component = self.component(name)
        if mpi_available is None:
            mpi_available = shutil.which("mpirun") is not None
        wheels = [
            with_extras(str(wheel_in(dist, need)), extras)
            for need, extras in map(split_extras, component.needs)
        ]
        wheels.append(with_extras(str(wheel_in(dist, name)), component.isolated_extras))
        return [
            *wheels,
            *([self.torch] if component.torch else []),
            *([self.s3_server] if component.s3_server else []),
            *([self.mpi] if component.mpi and mpi_available else []),
            *component.test_requires,
            *self.test_tools,
        ]


def wheel_in(dist: pathlib.Path, name: str) -> pathlib.Path:
    """The one wheel of distribution ``name`` in the folder ``dist``."""
    found = sorted(dist.glob(f"{name.replace('-', '_')}-*.whl"))
    if len(found) != 1:
        message = (
            f"{dist} holds {len(found)} wheels of {name}, expected one: {[w.name for w in found]}"
        )
        raise WorkspaceError(message)
    return found[0]


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        message = f"workspace.toml: {where} must be a list of strings, got {value!r}"
        raise WorkspaceError(message)
    return tuple(value)


def _typed(where: str, value: Any, kind: type) -> Any:
    # bool is an int: a `workers = true` must not pass as 1
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        message = f"workspace.toml: {where} must be a {kind.__name__}, got {value!r}"
        raise WorkspaceError(message)
    return value


def _unknown(where: str, table: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        message = f"workspace.toml: {where} has unknown keys {unknown}; known: {sorted(known)}"
        raise WorkspaceError(message)


def parse(text: str) -> Workspace:
    """The workspace that the text of a workspace.toml describes, checked."""
    data = tomllib.loads(text)
    _unknown("the top level", data, TOP_KEYS)
    _unknown("[meta]", data.get("meta", {}), {"name"})
    components = {}
    for name, table in _typed("[components]", data.get("components", {}), dict).items():
        where = f"[components.{name}]"
        _typed(where, table, dict)
        _unknown(where, table, COMPONENT_KEYS)
        component = Component(
            name=name,
            owns=_strings(f"{where} owns", table.get("owns")),
            torch=_typed(f"{where} torch", table.get("torch"), bool),
            extras=_strings(f"{where} extras", table.get("extras", [])),
            isolated_without=_strings(
                f"{where} isolated-without", table.get("isolated-without", [])
            ),
            needs=_strings(f"{where} needs", table.get("needs", [])),
            test_requires=_strings(f"{where} test-requires", table.get("test-requires", [])),
            s3_server=_typed(f"{where} s3-server", table.get("s3-server", False), bool),
            mpi=_typed(f"{where} mpi", table.get("mpi", False), bool),
            workers=_typed(f"{where} workers", table.get("workers", 1), int),
        )
        stray = sorted(set(component.isolated_without) - set(component.extras))
        if stray:
            message = f"workspace.toml: {where} isolated-without names {stray}, not in its extras"
            raise WorkspaceError(message)
        if component.workers < 1:
            message = f"workspace.toml: {where} workers must be 1 or more, got {component.workers}"
            raise WorkspaceError(message)
        components[name] = component
    if not components:
        message = "workspace.toml: no [components.<name>] table"
        raise WorkspaceError(message)
    for component in components.values():
        for need in component.needs:
            if split_extras(need)[0] not in components:
                message = (
                    f"workspace.toml: [components.{component.name}] needs {need!r},"
                    f" which is not a component ({', '.join(components)})"
                )
                raise WorkspaceError(message)
    return Workspace(
        torch=_typed("torch", data.get("torch"), str),
        test_tools=_strings("test-tools", data.get("test-tools")),
        s3_server=_typed("s3-server", data.get("s3-server"), str),
        mpi=_typed("mpi", data.get("mpi"), str),
        meta=_typed("[meta] name", data.get("meta", {}).get("name"), str),
        components=components,
    )


def load(path: pathlib.Path = FILE) -> Workspace:
    """The workspace of ``path`` (the repository's workspace.toml by default)."""
    return parse(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("names", help="the components, in workspace.toml's order")
    commands.add_parser("torch", help="the torch requirement")
    commands.add_parser("mpi", help="the mpi4py requirement of the mpi tests")
    commands.add_parser("dev-requirements", help="the workspace environment's test tools")
    commands.add_parser("editables", help="the workspace environment's components, with extras")
    requirements = commands.add_parser("requirements", help="a component's isolated environment")
    requirements.add_argument("component")
    requirements.add_argument("--dist", required=True, type=pathlib.Path, help="the wheels")
    for command in ("workers", "torch-free", "isolated-without"):
        commands.add_parser(command).add_argument("component")
    args = parser.parse_args(argv)
    try:
        workspace = load()
        if args.command == "names":
            lines = list(workspace.components)
        elif args.command == "torch":
            lines = [workspace.torch]
        elif args.command == "mpi":
            lines = [workspace.mpi]
        elif args.command == "dev-requirements":
            lines = workspace.dev_requirements()
        elif args.command == "editables":
            lines = workspace.editables()
        elif args.command == "requirements":
            lines = workspace.isolated_requirements(args.component, args.dist)
        elif args.command == "workers":
            lines = [str(workspace.component(args.component).workers)]
        elif args.command == "isolated-without":
            lines = list(workspace.component(args.component).isolated_without)
        else:
            lines = ["no" if workspace.component(args.component).torch else "yes"]
    except WorkspaceError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    for line in lines:  # none: no output
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
