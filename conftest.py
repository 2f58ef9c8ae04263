"""Repository-wide pytest hooks: tests marked ``gpu`` skip cleanly without CUDA; ``s3_server``;
the real components the tests promise, required where CI is set and counted for check.sh.

Kept free of torch imports so that ppe-config's torch-less environment can use it (moto,
pfio and s3fs are imported inside the fixture that needs them).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import itertools
import json
import logging
import os
import pathlib
import re
import sys
from collections.abc import Generator, Iterable, Iterator
from typing import Any, NamedTuple

import pytest

_NO_CUDA = "needs a CUDA device"

# torch.compile's inductor compiles kernels in a pool of worker processes by default, each of
# which imports torch (seconds of CPU apiece on a two-core machine, and the test waits for
# them) for the few kernels a test's tiny model needs: the tests compile in their own process.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason=_NO_CUDA)
        for item in gpu_items:
            item.add_marker(skip)
    for item in items:
        names = [component.name for component in REAL_COMPONENTS if component.used_by(item)]
        if names:  # the report carries them to pytest-xdist's controller
            item.user_properties.append((_PROPERTY, names))


def _register_hypothesis_profiles() -> None:
    # CI runs the property tests derandomized (the same examples every run, so a red CI is
    # reproducible); developers get fresh random examples by default.
    if importlib.util.find_spec("hypothesis") is None:
        return
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_register_hypothesis_profiles()


# flask comes with moto's "server" extra (moto.server needs it).
_S3_MODULES = ("moto", "flask", "boto3", "pfio", "s3fs")
_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Settings of the developer's environment that would send the clients elsewhere.
_S3_UNSET = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL")


class S3Server:
    """A local S3 server (moto) and clients for it, as given by the ``s3_server`` fixture.

    Attributes:
        endpoint: The server's URL (``http://127.0.0.1:PORT``).
    """

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self._client = boto3.client("s3", endpoint_url=endpoint)
        self._buckets = itertools.count(1)

    def new_bucket(self) -> str:
        """Create an empty bucket with a name no other test uses, and return the name."""
        name = f"ppe-test-{os.getpid()}-{next(self._buckets)}"
        self._client.create_bucket(Bucket=name)
        return name

    def pfio(self, url: str) -> Any:
        """``pfio.v2.from_url(url)`` for this server (``url`` like ``s3://bucket/prefix``)."""
        import pfio

        return pfio.v2.from_url(url, endpoint=self.endpoint)

    def s3fs(self) -> Any:
        """A new ``s3fs.S3FileSystem`` for this server (no instance or listing shared)."""
        import s3fs

        return s3fs.S3FileSystem(
            endpoint_url=self.endpoint,
            key=_S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            skip_instance_cache=True,
        )

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """The sorted keys of the objects in ``bucket`` starting with ``prefix``."""
        keys = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 for the session; skips without moto[server], pfio, s3fs.

    The AWS credentials of the environment are replaced by moto's test ones
    for the session (and restored afterwards).
    """
    missing = [name for name in _S3_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(
            f"needs moto[server], pfio and s3fs ({', '.join(missing)} missing): "
            "pip install 'ppe-training[s3]' 'moto[server]'"
        )
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request of the server to stderr.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with pytest.MonkeyPatch.context() as patch:
        for name in _S3_UNSET:
            patch.delenv(name, raising=False)
        for name, value in _S3_CREDENTIALS.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield S3Server(f"http://{host}:{port}")
        finally:
            server.stop()


# ---------------------------------------------------------------- real components
#
# The tests exercise real components (OpenMPI, Slurm, the S3 server, ignite, onnxruntime...) and
# skip, naming what is missing, where one is not installed: fine on a developer's machine, a
# hole in CI, where each must be there. Where the run requires them (CI is set, or
# PPE_REQUIRE_REAL_COMPONENTS=1, which .ci/run sets; PPE_REQUIRE_REAL_COMPONENTS=0 overrides CI),
# a skip whose reason says that a real component is missing, or a skip of a test that uses one's
# fixture or marker, fails instead, naming the component. An environment leaves out on purpose
# the components of the extras in PPE_EXTRAS_LEFT_OUT (scripts/isolated.sh sets it from
# workspace.toml's `isolated-without`): their skips stay skips.
# Each run counts the tests of each component (those that use its fixture or marker, or import
# it) passed, failed and skipped; where PPE_REAL_COMPONENTS_DIR is set, it writes the counts
# there as JSON, which scripts/real_components.py sums up at the end of scripts/check.sh.


@dataclasses.dataclass(frozen=True)
class RealComponent:
    """A component that tests exercise for real, and how to recognise them.

    Attributes:
        name: As printed (and the key of the counts).
        modules: Importable names; a test belongs to the component where its file imports one
            outside its tests (at the top, in a helper or fixture), or the test function imports
            one (``importorskip`` included).
        fixtures: A test using one of these fixtures belongs to it.
        markers: A test with one of these markers belongs to it.
        extras: The extras of our distributions that install it.
        missing: Regular expressions of skip reasons (matched at the start) saying that it is
            missing, besides ``could not import 'M'`` and ``needs M`` for one of ``modules``.
    """

    name: str
    modules: tuple[str, ...] = ()
    fixtures: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def provides(self, module: str) -> bool:
        """Whether ``module`` (dotted) is one of ``modules`` or inside one."""
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def declared_by(self, item: pytest.Item) -> bool:
        """Whether the test ``item`` uses one of ``fixtures`` or has one of ``markers``."""
        if set(getattr(item, "fixturenames", ())) & set(self.fixtures):
            return True
        return any(item.get_closest_marker(marker) is not None for marker in self.markers)

    def used_by(self, item: pytest.Item) -> bool:
        """Whether the test ``item`` exercises this component (declared, or imported)."""
        return self.declared_by(item) or any(self.provides(m) for m in _imports_of(item))

    def said_missing(self, reason: str) -> bool:
        """Whether the skip ``reason`` says that this component is missing."""
        if any(re.match(pattern, reason) for pattern in self.missing):
            return True
        named = _NAMED_MODULE.match(reason)
        return named is not None and self.provides(named.group("module"))


REAL_COMPONENTS = (
    RealComponent(
        "OpenMPI",
        modules=("mpi4py",),
        fixtures=("mpirun",),
        markers=("mpi",),
        missing=(r"needs OpenMPI's mpirun",),
    ),
    RealComponent(
        "Slurm",
        fixtures=("slurm_cluster",),
        markers=("slurm",),
        missing=(r"the Slurm tests need", r"the Slurm cluster of the tests did not start"),
    ),
    RealComponent(
        "S3 server (moto, pfio, s3fs)",
        modules=("moto", "pfio", "s3fs", "boto3"),
        fixtures=("s3_server",),
        extras=("s3",),
    ),
    RealComponent(
        "tensorboard",
        modules=("tensorboard", "torch.utils.tensorboard"),
        extras=("tensorboard",),
    ),
    RealComponent("ignite", modules=("ignite",), extras=("ignite",)),
    RealComponent("onnxruntime", modules=("onnxruntime",), extras=("runtime",)),
    RealComponent(
        "optuna",
        modules=("optuna",),
        extras=("optuna",),
        missing=(r"the optuna extra is not installed",),
    ),
    RealComponent("matplotlib", modules=("matplotlib",), extras=("plot",)),
    RealComponent(
        "Jupyter kernel",
        modules=("nbclient", "nbformat", "ipykernel", "ipywidgets"),
        extras=("notebook",),
    ),
    RealComponent("slack_sdk", modules=("slack_sdk",), extras=("slack",)),
    RealComponent("torchdata", modules=("torchdata",), extras=("torchdata",)),
)

# pytest.importorskip's own reason, or a reason starting "needs <module>"
_NAMED_MODULE = re.compile(r"(?:could not import '|needs )(?P<module>[A-Za-z_][\w.]*)")
_PROPERTY = "real_components"  # the user property of a test report: the components it uses
_MISSING = "real_component_missing"  # the attribute of a report turned into a failure here
_ROOT = pathlib.Path(__file__).resolve().parent


class RealComponentMissing(Exception):
    """A real component is missing where the tests must exercise it (CI)."""


def _true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _required() -> bool:
    """Whether a missing real component fails the run: as PPE_REQUIRE_REAL_COMPONENTS says
    (``1`` or ``0``) where it is set, else where CI is set."""
    if os.environ.get("PPE_REQUIRE_REAL_COMPONENTS", "").strip():
        return _true("PPE_REQUIRE_REAL_COMPONENTS")
    return _true("CI")


def _left_out() -> set[str]:
    """The names of the components this environment leaves out on purpose."""
    extras = {e.strip() for e in os.environ.get("PPE_EXTRAS_LEFT_OUT", "").split(",")}
    return {c.name for c in REAL_COMPONENTS if extras & set(c.extras)}


def _imported(nodes: Iterable[ast.AST]) -> set[str]:
    """The modules imported (or ``importorskip``-ed) by the statements of ``nodes``."""
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def _is_test(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
        "test"
    )


def _outside_tests(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``tree`` outside its test functions (its helpers and fixtures included)."""
    for child in ast.iter_child_nodes(tree):
        if not _is_test(child):
            yield child
            yield from _outside_tests(child)


class _ModuleImports(NamedTuple):
    """The imports of a test file: outside its tests (at the top, in helpers and fixtures,
    which concern all its tests), and in each test function (by first line)."""

    shared: set[str]
    tests: dict[int, set[str]]  # the line of the def and of each decorator -> its imports


_parsed: dict[pathlib.Path, _ModuleImports] = {}


def _imports_in_file(path: pathlib.Path) -> _ModuleImports:
    """The imports of the Python file ``path``, parsed once (none where unreadable)."""
    if path not in _parsed:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        tests = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_test(node):
                imports = _imported(ast.walk(node))
                for line in (node.lineno, *(d.lineno for d in node.decorator_list)):
                    tests[line] = imports
        _parsed[path] = _ModuleImports(_imported(_outside_tests(tree)), tests)
    return _parsed[path]


def _imports_of(item: pytest.Item) -> set[str]:
    """The modules the test ``item`` imports: those its file imports outside its tests, and
    those of its own function."""
    if item.path.suffix != ".py":
        return set()
    imports = _imports_in_file(item.path)
    code = getattr(getattr(item, "function", None), "__code__", None)
    line = getattr(code, "co_firstlineno", None)
    own = imports.tests.get(line, set()) if isinstance(line, int) else set()
    return imports.shared | own


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _missing_component(reason: str) -> RealComponent | None:
    """The real component that the skip ``reason`` says is missing, if any."""
    return next((c for c in REAL_COMPONENTS if c.said_missing(reason)), None)


def _fail_if_required(
    report: pytest.CollectReport | pytest.TestReport, item: pytest.Item | None = None
) -> None:
    """Turn the skipped ``report`` into a failure naming the component, where the run requires
    the real components (CI) and the skip says one is missing, or the skipped test ``item``
    uses one's fixture or marker (whatever the reason, but the lack of CUDA); other skips stay.
    """
    if not report.skipped or hasattr(report, "wasxfail") or not _required():
        return
    reason = _skip_reason(report)
    component = _missing_component(reason)
    if component is None and item is not None and not re.match(r"needs (a )?CUDA\b", reason):
        component = next((c for c in REAL_COMPONENTS if c.declared_by(item)), None)
    if component is None or component.name in _left_out():
        return
    message = (
        f"{component.name} is missing or does not work here, and this run requires every real "
        f"component the tests use (CI or PPE_REQUIRE_REAL_COMPONENTS=1): {reason}"
    )
    try:
        raise RealComponentMissing(message)
    except RealComponentMissing as error:
        # the message only, as pytest shows a skip's reason (style "value": no traceback)
        report.longrepr = pytest.ExceptionInfo.from_exception(error).getrepr(style="value")
    report.outcome = "failed"
    setattr(report, _MISSING, {"component": component.name, "reason": reason})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_if_required(report, item)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_if_required(report)
    return report


class _Outcome(NamedTuple):
    """What a test (or a skipped module) of real components came to."""

    components: list[str]
    outcome: str  # "passed", "failed" or "skipped"
    reason: str = ""  # of a skip
    failed_here: bool = False  # a skip turned into a failure (the run requires the component)


# nodeid -> _Outcome; in the controller where pytest-xdist runs workers (it gets every report)
_outcomes: dict[str, _Outcome] = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _record(report: pytest.CollectReport | pytest.TestReport, names: list[str]) -> None:
    missing = getattr(report, _MISSING, None)
    if isinstance(missing, dict):  # a skip turned into a failure: counted as skipped
        names = [*names, str(missing["component"])]
        outcome = _Outcome([], "skipped", str(missing["reason"]), failed_here=True)
    elif report.skipped:
        if hasattr(report, "wasxfail"):
            return
        reason = _skip_reason(report)
        component = _missing_component(reason)
        names = names if component is None else [*names, component.name]
        outcome = _Outcome([], "skipped", reason)
    elif report.failed:
        outcome = _Outcome([], "failed")
    elif report.when in ("call", "collect"):
        outcome = _Outcome([], "passed")
    else:
        return  # a passed setup or teardown: the call decides
    if not names:
        return
    before = _outcomes.get(report.nodeid)
    if before is None or _RANK[outcome.outcome] > _RANK[before.outcome]:
        _outcomes[report.nodeid] = outcome._replace(components=sorted(set(names)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    names = [
        str(name)
        for key, value in report.user_properties
        if key == _PROPERTY and isinstance(value, list)
        for name in value
    ]
    _record(report, names)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if not (report.skipped or report.failed):
        return  # its tests are counted as they run
    path = _ROOT / report.nodeid.split("::")[0]
    names = [
        c.name
        for c in REAL_COMPONENTS
        if path.suffix == ".py" and any(c.provides(m) for m in _imports_in_file(path).shared)
    ]
    _record(report, names)


def _environment() -> str:
    """The environment running the tests: its folder, relative to the repository if inside."""
    prefix = pathlib.Path(sys.prefix).resolve()
    return str(prefix.relative_to(_ROOT)) if prefix.is_relative_to(_ROOT) else str(prefix)


def real_component_counts() -> dict[str, Any]:
    """This run's tests of each real component, as written to PPE_REAL_COMPONENTS_DIR: the
    tests passed, failed and skipped (``failed_here``: the skips turned into failures), the
    reasons of the skips, and whether this environment leaves the component out on purpose."""
    left_out = _left_out()
    components = {}
    for component in REAL_COMPONENTS:
        mine = [o for o in _outcomes.values() if component.name in o.components]
        components[component.name] = {
            **{kind: sum(o.outcome == kind for o in mine) for kind in _RANK},
            "failed_here": sum(o.failed_here for o in mine),
            "reasons": sorted({o.reason for o in mine if o.reason}),
            "left_out": component.name in left_out,
        }
    return {"environment": _environment(), "required": _required(), "components": components}


_COUNTS_DIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # Taken out of the environment: a pytest that a test starts (which inherits it) writes no
    # counts; neither do pytest-xdist's workers, started later (the controller counts).
    config.stash[_COUNTS_DIR] = os.environ.pop("PPE_REAL_COMPONENTS_DIR", "")


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = session.config.stash.get(_COUNTS_DIR, "")
    if not folder or hasattr(session.config, "workerinput"):
        return  # not asked for; or a pytest-xdist worker
    path = pathlib.Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", _environment()).strip("_.")  # not a hidden file
    (path / f"{name}-{os.getpid()}.json").write_text(json.dumps(real_component_counts(), indent=1))
