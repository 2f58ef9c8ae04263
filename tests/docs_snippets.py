"""Find the code blocks of the Markdown docs and run them, as ``test_docs_snippets.py`` does.

A page is a story: its Python blocks run in order, in one namespace (``__name__`` is
``"__main__"``, as in a script), in the current directory. HTML comments, which a reader of
the rendered page does not see, steer the run; each sits on its own lines:

- before a block (blank lines may separate them, text may not):

  - ``<!-- setup: CODE -->`` runs ``CODE`` first (a toy ``dataset`` the text takes as given);
  - ``<!-- skip: REASON -->`` never runs the block; the reason is required;
  - ``<!-- requires: cuda, cupy -->`` runs it only where CUDA works and each module imports;
    ``requires: s3`` where the runner provides a local S3 server, its URL in the environment
    (``AWS_ENDPOINT_URL``, which boto3, s3fs and pfio read, with the credentials);
  - ``<!-- script: python -->`` or ``<!-- script: torchrun N -->`` runs the block as a script
    of its own, in a new directory: its setups, the block, then its checks (under
    ``if __name__ == "__main__":``, so that spawned children do not run them) go into one
    file at their lines of the page, run by ``python FILE`` or by torchrun on ``N`` local
    processes (gloo); it must exit 0, and the checks run in every process. For a block that
    needs a file of its own (a spawned child imports from it) or several processes. The page's
    namespace is not the script's, and ``printed``, ``warned`` and ``block`` are not defined
    there; a warning the script would show is an error;
  - ``<!-- signature: MODULE.NAME -->`` (the block is a signature, ``name(a, *, b=1)``) checks
    that the object's parameters are the ones shown (names, kinds, defaults; a leading
    ``self`` aside) instead of running the block;
  - ``<!-- file: NAME -->`` (before a block of any language, such as YAML) writes the block's
    text to ``NAME``, for the blocks that read it;

- after a Python block: ``<!-- check: CODE -->`` runs ``CODE``, which must hold an
  ``assert``, in the page's namespace, with three more names: ``printed`` (what the block printed), ``warned`` (the warnings it raised,
  ``warnings.WarningMessage`` objects) and ``block`` (its code, for ``exec(block)``).

A block that warns fails unless a check empties ``warned``. Blocks made of ``>>>`` examples run
as doctests. A comment starting with an unknown ``name:`` is an error, so that a misspelt marker
never turns a check off silently.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import importlib.util
import inspect
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BEFORE = ("setup", "skip", "requires", "script", "signature", "file")
AFTER = ("check",)
PYTHON = ("python", "py", "pycon")
# Requirements that are not modules: what the runner provides (run_page's ``services``).
SERVICES = {"s3": "a local S3 server (AWS_ENDPOINT_URL)"}
SCRIPT_TIMEOUT = 300  # seconds; a hung collective ends the ranks long before
# The warnings Python shows for a script (its own deprecations, not its libraries'), as errors.
SCRIPT_WARNINGS = ",".join(
    [
        "error",
        *(
            f"ignore::{category.__name__}"
            for category in (
                DeprecationWarning,
                PendingDeprecationWarning,
                ImportWarning,
                ResourceWarning,
            )
        ),
        "error::DeprecationWarning:__main__",
    ]
)
_LAUNCHER = re.compile(r"^(python|torchrun ([1-9][0-9]*))$")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^<!--\s*(?P<name>[a-z][a-z-]*):(?P<text>.*?)-->\s*$", re.DOTALL)


class MarkerError(ValueError):
    """A marker that is misspelt, misplaced or incomplete."""


@dataclass(frozen=True)
class Marker:
    name: str
    text: str
    line: int


@dataclass
class Block:
    """A fenced block and the markers attached to it."""

    line: int  # the line of the opening fence (1-based)
    language: str
    code: str
    before: list[Marker] = field(default_factory=list)
    checks: list[Marker] = field(default_factory=list)

    @property
    def is_python(self) -> bool:
        return self.language in PYTHON

    def markers(self, name: str) -> list[Marker]:
        return [marker for marker in self.before if marker.name == name]

    def requirements(self) -> list[str]:
        """The names of its ``requires`` markers."""
        return [
            name.strip() for marker in self.markers("requires") for name in marker.text.split(",")
        ]

    def skip_reason(self, services: Collection[str] = ()) -> str | None:
        """Why the block does not run here, or ``None`` when it runs.

        ``services`` names the ``SERVICES`` the runner provides.
        """
        for marker in self.markers("skip"):
            return marker.text.strip()
        for requirement in self.requirements():
            if requirement in SERVICES:
                if requirement not in services:
                    return f"needs {SERVICES[requirement]}"
            elif not requirement_met(requirement):
                return f"needs {'a CUDA device' if requirement == 'cuda' else requirement}"
        return None


@dataclass
class Page:
    path: Path
    name: str  # as shown in test ids and messages: relative to the repository
    blocks: list[Block]  # the Python blocks, and the other blocks that write a file

    @property
    def python_blocks(self) -> list[Block]:
        return [block for block in self.blocks if block.is_python]


def requirement_met(requirement: str) -> bool:
    """Whether a ``requires`` entry is available: ``cuda``, or a module that can be imported."""
    if requirement == "cuda":
        import torch

        return bool(torch.cuda.is_available())
    return importlib.util.find_spec(requirement) is not None


def parse(text: str, name: str = "<page>", path: Path | None = None) -> Page:
    """Split a Markdown page into its blocks and attach the markers; raise ``MarkerError``."""
    lines = text.split("\n")
    items: list[Block | Marker | None] = []  # None: a line of text between them
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        fence = _FENCE.match(line)
        if fence:
            end = _closing_fence(lines, i, fence.group("fence"))
            body = "\n".join(lines[i + 1 : end])
            language = (fence.group("info").split() or [""])[0].lower()
            items.append(Block(i + 1, language, textwrap.dedent(body) + "\n"))
            i = end + 1
        elif stripped.startswith("<!--"):
            end = i
            while "-->" not in lines[end]:
                end += 1
                if end == len(lines):
                    raise MarkerError(f"{name}:{i + 1}: an HTML comment that never ends")
            comment = textwrap.dedent("\n".join(lines[i : end + 1])).strip()
            items.append(_marker(comment, i + 1, name))
            i = end + 1
        else:
            if stripped:
                items.append(None)
            i += 1
    return Page(path or Path(name), name, _attach(items, name))


def _closing_fence(lines: list[str], start: int, fence: str) -> int:
    for end in range(start + 1, len(lines)):
        candidate = lines[end].strip()
        if candidate.startswith(fence[0] * len(fence)) and not candidate.strip(fence[0]):
            return end
    return len(lines)  # CommonMark: an unclosed fence runs to the end of the page


def _marker(comment: str, line: int, page: str) -> Marker | None:
    match = _MARKER.match(comment)
    if match is None:
        return None  # an ordinary comment, not for us
    marker_name = match.group("name")
    if marker_name not in BEFORE + AFTER:
        message = f"{page}:{line}: unknown marker {marker_name!r}; known: {BEFORE + AFTER}"
        raise MarkerError(message)
    # `<!-- check: x == 1 -->` on one line, or the code on the lines below `<!-- check:`.
    first, _, rest = match.group("text").partition("\n")
    # A leading empty line stays, so that the code's lines are the page's.
    content = (first.strip() + "\n" + textwrap.dedent(rest)).rstrip() + "\n"
    if not content.strip():
        raise MarkerError(
            f"{page}:{line}: {marker_name!r} needs a text: <!-- {marker_name}: ... -->"
        )
    if marker_name == "check" and not _asserts(content):
        message = (
            f"{page}:{line}: a check must assert something (`assert ...`): a bare expression "
            "is computed and thrown away, so the check could never fail"
        )
        raise MarkerError(message)
    if marker_name == "script" and not _LAUNCHER.match(content.strip()):
        message = (
            f"{page}:{line}: unknown launcher {content.strip()!r}: "
            "'python' or 'torchrun N' (N processes)"
        )
        raise MarkerError(message)
    return Marker(marker_name, content, line)


def _asserts(code: str) -> bool:
    """Whether ``code`` holds an ``assert`` statement (code that does not parse counts: the
    run reports its syntax error)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return True
    return any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def _attach(items: list[Block | Marker | None], page: str) -> list[Block]:
    blocks: list[Block] = []
    pending: list[Marker] = []  # before-markers waiting for their block
    previous: Block | None = None  # the block a check may follow
    for item in items:
        if isinstance(item, Block):
            for marker in pending:
                if marker.name != "file" and not item.is_python:
                    language = item.language or "plain"
                    message = f"{page}:{marker.line}: {marker.name!r} precedes a {language} block"
                    raise MarkerError(message)
            item.before, pending = pending, []
            _no_conflict(item, page)
            if item.is_python or item.markers("file"):
                blocks.append(item)
            previous = item
        elif isinstance(item, Marker) and item.name in AFTER:
            if pending or previous is None or not previous.is_python:
                raise MarkerError(f"{page}:{item.line}: 'check' must follow a Python block")
            previous.checks.append(item)
        elif isinstance(item, Marker):
            pending.append(item)
        else:  # text
            if pending:
                raise MarkerError(
                    f"{page}:{pending[0].line}: {pending[0].name!r} must precede a block, "
                    "with nothing but blank lines between"
                )
            previous = None
    if pending:
        raise MarkerError(f"{page}:{pending[0].line}: {pending[0].name!r} precedes no block")
    for block in blocks:
        if block.markers("signature") and block.checks:
            message = f"{page}:{block.checks[0].line}: a signature block takes no check"
            raise MarkerError(message)
    return blocks


def _no_conflict(block: Block, page: str) -> None:
    """A block is a signature, a script or a part of the page: one of them."""
    names = [marker.name for marker in block.before]
    for name in ("script", "signature"):
        if names.count(name) > 1:
            raise MarkerError(f"{page}:{block.line}: more than one {name!r} marker")
    if "signature" in names and len(set(names) - {"skip", "requires"}) > 1:
        message = f"{page}:{block.line}: a signature block takes no setup, script or file"
        raise MarkerError(message)


Rerun = Callable[["subprocess.CompletedProcess[str]"], bool]


def run_page(
    page: Page, services: Collection[str] = (), rerun_if: Rerun | None = None
) -> list[Block]:
    """Run the page's blocks in the current directory; return those skipped here.

    ``services`` names the ``SERVICES`` the caller provides. A script that fails so that
    ``rerun_if(process)`` is true (a known abort of a library, never the script's own failure)
    runs again from a new directory, up to three runs in all.

    Raises whatever a block, its setup or its checks raise; ``AssertionError`` for a failed
    doctest, a warning no check took, a script that failed, or a signature that differs.
    """
    scope: dict[str, Any] = {"__name__": "__main__", "__file__": str(page.path)}
    skipped = []
    for block in page.blocks:
        for marker in block.markers("file"):
            Path(marker.text.strip()).write_text(block.code)
        if not block.is_python:
            continue
        if block.skip_reason(services) is not None:
            skipped.append(block)
            continue
        if block.markers("signature"):
            _check_signature(page, block, block.markers("signature")[0])
            continue
        if block.markers("script"):
            _run_script(page, block, rerun_if)
            continue
        for marker in block.markers("setup"):
            _, warned = _execute(page, marker.line, marker.text, scope, "setup")
            _no_warnings(f"{page.name}:{marker.line}: the setup", warned)
        printed, warned = _execute(page, block.line + 1, block.code, scope)
        for marker in block.checks:
            extra = {"printed": printed, "warned": warned, "block": block.code}
            _execute(page, marker.line, marker.text, scope, "check", extra)
        _no_warnings(f"{page.name}:{block.line}: the block", warned)
    return skipped


def _check_signature(page: Page, block: Block, marker: Marker) -> None:
    """Compare the signature the block shows with that of the object the marker names."""
    where = f"{page.name}:{block.line}"
    target = marker.text.strip()
    try:
        tree = ast.parse(f"def {block.code.strip()}: pass")
    except SyntaxError as error:
        message = f"{where}: not a signature such as `name(a, *, b=1)`: {block.code.strip()!r}"
        raise AssertionError(message) from error
    (definition,) = tree.body  # `def` and one line: one function
    assert isinstance(definition, ast.FunctionDef)
    scope: dict[str, Any] = {}
    exec(compile(tree, where, "exec"), scope)  # the defaults shown are evaluated
    shown = scope[definition.name]
    documented = _parameters(inspect.signature(shown))
    actual = _parameters(inspect.signature(_resolve(target, where)))
    if actual[:1] and actual[0][0] == "self" and documented[:1] != actual[:1]:
        actual = actual[1:]
    if documented != actual:
        message = (
            f"{where}: the signature shown differs from {target}'s:\n"
            f"  shown:  {_format(documented)}\n  actual: {_format(actual)}"
        )
        raise AssertionError(message)


def _parameters(signature: inspect.Signature) -> list[tuple[str, str, str]]:
    """Name, kind and default (its type and repr, so that ``True`` is not ``1``) of each."""
    return [
        (
            parameter.name,
            parameter.kind.description,
            ""
            if parameter.default is inspect.Parameter.empty
            else f"{type(parameter.default).__name__} {parameter.default!r}",
        )
        for parameter in signature.parameters.values()
    ]


def _format(parameters: list[tuple[str, str, str]]) -> str:
    return ", ".join(
        f"{name} ({kind}{', default ' + default if default else ''})"
        for name, kind, default in parameters
    )


def _resolve(target: str, where: str) -> Any:
    """The object named ``package.module.attribute...``: the longest importable module, then
    its attributes."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            try:
                obj = getattr(obj, attribute)
            except AttributeError:
                raise AssertionError(f"{where}: {target} does not exist") from None
        return obj
    raise AssertionError(f"{where}: no module of {target} imports")


def _run_script(page: Page, block: Block, rerun_if: Rerun | None) -> None:
    """Run the block as a script (see ``script`` in the module's docstring)."""
    (marker,) = block.markers("script")
    launcher = marker.text.strip()
    name = f"{Path(page.name).stem}_md_{block.line}".replace("-", "_")
    source = _script_source(block)
    command = [sys.executable]
    if launcher != "python":
        nproc = launcher.split()[1]
        command += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": SCRIPT_WARNINGS}
    for _ in range(3):
        directory = Path(name).resolve()
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        (directory / f"{name}.py").write_text(source)
        process = _run([*command, f"{name}.py"], directory, environment)
        if process.returncode == 0 or rerun_if is None or not rerun_if(process):
            break
    if process.returncode != 0:
        errors = process.stderr  # a rank's traceback, then torchrun's summary
        if len(errors) > 8000:
            errors = f"{errors[:5000]}\n[...]\n{errors[-3000:]}"
        message = (
            f"{page.name}:{block.line}: the script ({launcher}) exited with "
            f"{process.returncode}; it printed:\n{process.stdout[-3000:]}\n"
            f"and its errors:\n{errors}"
        )
        raise AssertionError(message)


def _script_source(block: Block) -> str:
    """The setups, the block and its checks, each at its lines of the page."""
    lines: list[str] = []

    def place(first: int, text: str) -> None:  # ``first``: the 1-based page line of ``text``
        lines.extend([""] * (first - 1 - len(lines)))
        lines.extend(text.rstrip("\n").split("\n"))

    for marker in block.markers("setup"):
        place(marker.line, marker.text)
    place(block.line + 1, block.code)
    if block.checks:
        place(block.checks[0].line - 1, 'if __name__ == "__main__":  # not in spawned children')
        for marker in block.checks:
            place(marker.line, textwrap.indent(marker.text, "    "))
    return "\n".join(lines) + "\n"


def _run(
    command: list[str], directory: Path, environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``directory``; on timeout end it with its children (torchrun's
    workers) and raise."""
    with subprocess.Popen(
        command,
        cwd=directory,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=SCRIPT_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            message = (
                f"{command[-1]} ran for more than {SCRIPT_TIMEOUT} s; its errors:\n{stderr[-6000:]}"
            )
            raise AssertionError(message) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _no_warnings(what: str, warned: list[warnings.WarningMessage]) -> None:
    if warned:
        raised = "\n".join(f"  {w.category.__name__}: {w.message}" for w in warned)
        message = (
            f"{what} warned; a check must take the warnings (warned.clear()) if the text "
            f"expects them:\n{raised}"
        )
        raise AssertionError(message)


def _show_warnings_as_python_does_for_a_script() -> None:
    """Record every warning a script would show (its own deprecations, not its libraries')."""
    warnings.simplefilter("always")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("always", category=DeprecationWarning, module="__main__")


def _execute(
    page: Page,
    line: int,
    code: str,
    scope: dict[str, Any],
    role: str = "",
    extra: dict[str, Any] | None = None,
) -> tuple[str, list[warnings.WarningMessage]]:
    """Run code that starts at ``line`` of the page; return what it printed and warned."""
    out = io.StringIO()
    saved = {key: scope[key] for key in extra or {} if key in scope}
    scope.update(extra or {})
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as warned:
            _show_warnings_as_python_does_for_a_script()
            if role != "check" and _is_doctest(code):
                _run_doctest(page, line, code, scope)
            else:
                # Tracebacks point at the page's own lines.
                source = "\n" * (line - 1) + code
                exec(compile(source, str(page.path), "exec"), scope)
    except BaseException as error:
        where = f"{page.name}:{line}" + (f" ({role})" if role else "")
        printed = f"; it printed:\n{out.getvalue()}" if out.getvalue() else ""
        error.add_note(f"in {where}{printed}")
        raise
    finally:
        for key in extra or {}:
            scope.pop(key, None)
        scope.update(saved)
    return out.getvalue(), warned


def _is_doctest(code: str) -> bool:
    return code.lstrip().startswith(">>>")


def _run_doctest(page: Page, line: int, code: str, scope: dict[str, Any]) -> None:
    test = doctest.DocTestParser().get_doctest(code, scope, page.name, str(page.path), line - 1)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=flags)
    result = runner.run(test, out=report.write, clear_globs=False)
    if result.failed:
        raise AssertionError(f"{page.name}:{line}: doctest failed:\n{report.getvalue()}")
