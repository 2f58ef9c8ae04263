"""A real package index on 127.0.0.1 for the release checks, and fresh environments using it.

``Index`` lays out a scratch folder, fills the index with the third-party wheels that our
distributions need (at the versions of the workspace environment), serves it with pypiserver
(uploads without authentication, no fallback to any other index), uploads with twine, and
creates virtual environments whose pip and uv see only that index and the folder holding this
machine's torch wheel. Used by ``scripts/check_index.py``.
"""

from __future__ import annotations

import email.parser
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager

import workspace
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Our distributions and the test tools of every test environment: workspace.toml.
WORKSPACE = workspace.load()
META = WORKSPACE.meta
COMPONENTS = tuple(WORKSPACE.components)
OURS = WORKSPACE.names
TEST_TOOLS = WORKSPACE.test_tools
# The pip that the scenario environments get.
PIP = "pip==26.2.1"
# GPU-only downloads that no CPU scenario installs.
SKIPPED_EXTRAS = {"cupy"}


def only_for(requirement: Requirement, extras: set[str]) -> bool:
    """Whether ``requirement`` is asked for by one of ``extras`` and never without an extra.

    The marker is evaluated rather than matched as text: hatch writes ``extra == 'cupy'``.
    """
    marker = requirement.marker
    if marker is None or marker.evaluate({"extra": ""}):
        return False
    return any(marker.evaluate({"extra": extra}) for extra in extras)


class CheckFailed(Exception):
    """A scenario's check failed; the message says what was expected and what happened."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def say(line: str) -> None:
    print(line, flush=True)


class Index:
    """The scratch layout, the index server and the environments of one run."""

    def __init__(self, dist: pathlib.Path, work: pathlib.Path) -> None:
        self.dist = dist
        self.work = work
        self.uploads = work / "index" / "ours"
        self.third_party = work / "index" / "third-party"
        self.torch_dir = work / "torch"
        self.venvs = work / "venvs"
        for folder in (self.uploads, self.third_party, self.torch_dir, self.venvs):
            folder.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/simple/"
        self.full_env: pathlib.Path | None = None  # the environment of scenario 2
        self.base_python = getattr(sys, "_base_executable", sys.executable)
        # Scenario commands see no pip/uv configuration of this machine: only the index
        # and the folder holding the torch wheel.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PIP_", "UV_", "HATCH_", "VIRTUAL_ENV", "PYTHON"))
        }
        env.update(
            PIP_CONFIG_FILE=os.devnull,
            PIP_INDEX_URL=self.url,
            PIP_FIND_LINKS=str(self.torch_dir),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            # No .pyc compilation: the scenarios are about which files land, and compiling every
            # module doubles the time of each install. (PIP_NO_COMPILE=1 would turn it on: pip
            # reads the variables of its --no-* options inverted.)
            PIP_COMPILE="0",
            PIP_CACHE_DIR=str(work / "cache" / "pip"),
            UV_NO_CONFIG="1",
            UV_INDEX_URL=self.url,
            UV_FIND_LINKS=str(self.torch_dir),
            UV_CACHE_DIR=str(work / "cache" / "uv"),
            UV_PYTHON_DOWNLOADS="never",
        )
        self.env = env
        self.versions = {
            str(canonicalize_name(parse_wheel_filename(w.name)[0])): str(
                parse_wheel_filename(w.name)[1]
            )
            for w in dist.glob("*.whl")
        }
        missing = set(OURS) - set(self.versions)
        expect(
            not missing, f"{dist} lacks the wheels of {sorted(missing)}: run check_wheels.py first"
        )

    # ------------------------------------------------------------------ commands

    def run(
        self,
        command: list[str],
        *,
        cwd: pathlib.Path | None = None,
        ok: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            command,
            cwd=cwd or self.work,
            env=env or self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if ok and result.returncode != 0:
            message = f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stdout}{result.stderr}"
            raise CheckFailed(message)
        return result

    def uv(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "-m", "uv", *args])

    def venv(self, name: str, *, torch: bool = False) -> pathlib.Path:
        """A fresh environment with pip (and, to save time, torch installed by uv).

        uv links torch from its cache (under ``WORK``) instead of unpacking 800 MB each time.
        """
        path = self.venvs / name
        shutil.rmtree(path, ignore_errors=True)
        self.uv("venv", "-q", "--python", self.base_python, str(path))
        python = path / "bin" / "python"
        self.uv("pip", "install", "-q", "--python", str(python), PIP)
        if torch:
            self.uv("pip", "install", "-q", "--python", str(python), self.torch_requirement)
        return python

    def pip(
        self, python: pathlib.Path, *args: str, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run([str(python), "-m", "pip", *args], ok=ok)

    def installed(self, python: pathlib.Path) -> dict[str, str]:
        listing = json.loads(self.pip(python, "list", "--format=json").stdout)
        return {str(canonicalize_name(d["name"])): d["version"] for d in listing}

    def python_code(
        self, python: pathlib.Path, code: str, *, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # From the scratch folder, so that nothing of the checkout is importable.
        return self.run([str(python), "-c", code], cwd=self.work, ok=ok)

    # ------------------------------------------------------------------ index

    @property
    def torch_requirement(self) -> str:
        (wheel,) = self.torch_dir.glob("torch-*.whl")
        return f"torch=={parse_wheel_filename(wheel.name)[1]}"

    def fill_third_party(self) -> None:
        """Put every third-party wheel the scenarios need on the index, torch aside.

        Versions are those of the workspace environment (.venv), fetched with this machine's
        pip configuration; torch stays out of the index, in its own find-links folder.
        """
        freeze = subprocess.run(
            [sys.executable, "-m", "pip", "list", "--format=freeze", "--exclude-editable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        constraints = self.work / "constraints.txt"
        constraints.write_text(
            "\n".join(
                line
                for line in freeze
                if canonicalize_name(line.split("==")[0]) not in {*OURS, "pip", "setuptools"}
            )
            + "\n"
        )
        requirements = sorted(self.third_party_requirements())
        machine_env = {**os.environ, "PIP_CACHE_DIR": str(self.work / "cache" / "pip-download")}
        self.run(
            [
                sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                "--only-binary", ":all:", "-d", str(self.third_party), "-c", str(constraints),
                *requirements, *TEST_TOOLS, PIP,
            ],
            env=machine_env,
        )  # fmt: skip
        (torch,) = self.third_party.glob("torch-*.whl")
        torch.rename(self.torch_dir / torch.name)

    def third_party_requirements(self) -> set[str]:
        """The requirements of our wheels (every extra but GPU-only ones) on other projects."""
        found = set()
        for wheel in self.dist.glob("*.whl"):
            with zipfile.ZipFile(wheel) as zf:
                (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
                metadata = email.parser.BytesParser().parsebytes(zf.read(name))
            for raw in metadata.get_all("Requires-Dist") or []:
                requirement = Requirement(raw)
                if canonicalize_name(requirement.name) in OURS or only_for(
                    requirement, SKIPPED_EXTRAS
                ):
                    continue
                requirement.marker = None
                found.add(str(requirement))
        return found

    @contextmanager
    def serving(self) -> Iterator[None]:
        log = (self.work / "pypiserver.log").open("wb")
        server = subprocess.Popen(
            [
                sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(self.port),
                "-a", ".", "-P", ".", "--disable-fallback", "--log-stream", "stderr",
                str(self.uploads), str(self.third_party),
            ],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                        break
                except OSError:
                    expect(server.poll() is None, f"pypiserver exited: see {log.name}")
                    expect(time.monotonic() < deadline, "pypiserver did not answer within 30 s")
                    time.sleep(0.2)
            yield
        finally:
            server.terminate()
            server.wait(timeout=10)
            log.close()

    def upload(self, files: list[pathlib.Path]) -> None:
        self.run(
            [
                sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                "--repository-url", f"http://127.0.0.1:{self.port}/", "-u", "ci", "-p", "ci",
                *map(str, files),
            ]
        )  # fmt: skip
        for file in files:
            expect((self.uploads / file.name).is_file(), f"the index did not store {file.name}")
