"""Find the code blocks of the Markdown docs and run them, as ``test_docs_snippets.py`` does.

A page is a story: its Python blocks run in order, in one namespace (``__name__`` is
``"__main__"``, as in a script), in the current directory. HTML comments, which a reader of
the rendered page does not see, steer the run; each sits on its own lines:

- before a block (blank lines may separate them, text may not):

  - ``<!-- setup: CODE -->`` runs ``CODE`` first (a toy ``dataset`` the text takes as given);
  - ``<!-- skip: REASON -->`` never runs the block; the reason is required;
  - ``<!-- requires: cuda, cupy -->`` runs it only where CUDA works and each module imports;
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
import importlib.util
import io
import re
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BEFORE = ("setup", "skip", "requires", "file")
AFTER = ("check",)
PYTHON = ("python", "py", "pycon")

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

    def skip_reason(self) -> str | None:
        """Why the block does not run here, or ``None`` when it runs."""
        for marker in self.markers("skip"):
            return marker.text.strip()
        for marker in self.markers("requires"):
            for requirement in (name.strip() for name in marker.text.split(",")):
                if not requirement_met(requirement):
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
    return blocks


def run_page(page: Page) -> list[Block]:
    """Run the page's blocks in the current directory; return those skipped here.

    Raises whatever a block, its setup or its checks raise; ``AssertionError`` for a failed
    doctest or a warning no check took.
    """
    scope: dict[str, Any] = {"__name__": "__main__", "__file__": str(page.path)}
    skipped = []
    for block in page.blocks:
        for marker in block.markers("file"):
            Path(marker.text.strip()).write_text(block.code)
        if not block.is_python:
            continue
        if block.skip_reason() is not None:
            skipped.append(block)
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
