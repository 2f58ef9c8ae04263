"""Every Python block of README.md and docs/ runs, and the checks beside it hold.

Each page runs in order, in one namespace, in a temporary directory; HTML comments in the
Markdown add hidden setup, checks and skips with their reasons (see ``docs_snippets.py``).
Each skipped block is reported as a skipped test naming its line and reason. The pages'
servers and processes are the tests' own: the ``s3_server`` fixture (moto) for
``requires: s3``, torchrun on local gloo processes for ``script: torchrun N``.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ppe_integration_tests_fixtures import aborted_at_exit  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent


def _load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "ppe_tests_docs_snippets", Path(__file__).with_name("docs_snippets.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


snippets = _load_harness()


def _pages() -> list[Any]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages = [snippets.parse(p.read_text(), str(p.relative_to(ROOT)), p) for p in paths]
    return [page for page in pages if page.python_blocks]


PAGES = _pages()
# The services the test provides (the s3_server fixture skips the page, naming what is
# missing, where moto, pfio or s3fs are not installed).
SERVICES = ("s3",)
SKIPPED = [
    (page.name, block.line, reason)
    for page in PAGES
    for block in page.python_blocks
    if (reason := block.skip_reason(SERVICES)) is not None
]


@pytest.fixture(autouse=True)
def _like_a_fresh_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each page starts in an empty directory, with seeded generators and no profiler records,
    outside any Slurm job (a page's PreemptionHandler(requeue=True) must not requeue one).

    The pages' models are tiny: one thread computes them faster than two, much faster on a
    loaded machine.
    """
    import numpy
    import torch

    from pytorch_pfn_extras import profiler

    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    random.seed(0)
    numpy.random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    profiler.clear_tracer()
    profiler.get_time_summary().summary(clear=True)
    yield
    profiler.clear_tracer()  # the pages' trace events are not for the tests run next
    torch.set_num_threads(threads)


def _rerun_if(process: subprocess.CompletedProcess[str]) -> bool:
    """A torchrun script that failed by gloo's abort at exit alone runs again."""
    return bool(aborted_at_exit(process))


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_python_block_of_the_page_runs_and_its_checks_hold(
    page: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if any("s3" in block.requirements() for block in page.python_blocks):
        server = request.getfixturevalue("s3_server")  # the credentials are set already
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    skipped = snippets.run_page(page, SERVICES, _rerun_if)
    if len(skipped) == len(page.python_blocks):
        pytest.skip(f"{page.name}: every block is skipped here (see the skipped blocks' tests)")


@pytest.mark.parametrize(
    ("page", "line", "reason"), SKIPPED, ids=[f"{page}:{line}" for page, line, _ in SKIPPED]
)
def test_skipped_block(page: str, line: int, reason: str) -> None:
    pytest.skip(f"{page}:{line}: {reason}")


def test_the_docs_have_python_blocks() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "docs/getting-started.md", "docs/trainer.md"} <= names
    assert sum(len(page.python_blocks) for page in PAGES) >= 80


def test_no_block_of_the_docs_is_skipped_everywhere() -> None:
    """A block runs wherever what it needs is there (a GPU, CuPy): none is skipped always.
    Servers and processes are the tests' own (``requires: s3``, ``script: torchrun N``); a
    signature is compared with the code (``signature: ...``)."""
    always = [
        f"{page.name}:{block.line}: {block.skip_reason()}"
        for page in PAGES
        for block in page.python_blocks
        if block.markers("skip")
    ]
    assert always == []


# The harness itself.

PAGE = """\
Text.

<!-- setup: x = 2 -->
```python
y = x * 3
print(y)
```
<!-- check:
assert printed == "6\\n"
assert y == 6
-->

<!-- file: conf.yaml -->
```yaml
a: 1
```

<!-- skip: needs a GPU -->
```python
raise SystemExit
```

<!-- requires: cuda, a_module_nobody_has -->
```python
raise SystemExit
```

- a list item

  ```python
  import pathlib
  z = pathlib.Path("conf.yaml").read_text()
  ```

```python
>>> y + 1
7
```

<!-- a comment: not a marker, since it has spaces before the colon -->
"""


def test_the_parser_attaches_markers_and_runs_the_page_in_order(tmp_path: Path) -> None:
    page = snippets.parse(PAGE, "page.md")
    assert [(block.line, block.language) for block in page.blocks] == [
        (4, "python"),
        (14, "yaml"),
        (19, "python"),
        (24, "python"),
        (30, "python"),
        (35, "python"),
    ]
    assert [block.skip_reason() for block in page.python_blocks] == [
        None,
        "needs a GPU",
        "needs a CUDA device"
        if not snippets.requirement_met("cuda")
        else "needs a_module_nobody_has",
        None,
        None,
    ]
    assert page.blocks[0].checks[0].text == '\nassert printed == "6\\n"\nassert y == 6\n'
    skipped = snippets.run_page(page)  # the fixture moved us to tmp_path
    assert [block.line for block in skipped] == [19, 24]
    assert (tmp_path / "conf.yaml").read_text() == "a: 1\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- chek: x -->\n```python\npass\n```\n", "unknown marker 'chek'"),
        ("<!-- skip: -->\n```python\npass\n```\n", "'skip' needs a text"),
        ("<!-- skip: why -->\nText.\n\n```python\npass\n```\n", "must precede a block"),
        ("<!-- setup: x = 1 -->\n```bash\nls\n```\n", "precedes a bash block"),
        ("Text.\n<!-- check: assert True -->\n", "'check' must follow a Python block"),
        (
            "```python\npass\n```\nText.\n<!-- check: assert True -->\n",
            "must follow a Python block",
        ),
        ("```python\nx = 1\n```\n<!-- check: x == 2 -->\n", "a check must assert something"),
        ("```python\nx = 1\n```\n<!-- check:\nprint(x)\n-->\n", "a check must assert"),
        ("<!-- skip: why -->\n", "precedes no block"),
        ("<!-- setup: x = 1\n", "never ends"),
    ],
)
def test_misplaced_or_misspelt_markers_are_errors(text: str, message: str) -> None:
    with pytest.raises(snippets.MarkerError, match=message):
        snippets.parse(text, "page.md")


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("```python\nassert 1 == 2\n```\n<!-- check: assert True -->\n", AssertionError, None),
        ("```python\nx = 1\n```\n<!-- check: assert x == 2 -->\n", AssertionError, None),
        (
            "```python\nimport warnings\nwarnings.warn('careful')\n```\n",
            AssertionError,
            "the block warned",
        ),
        ("```python\n>>> 1 + 1\n3\n```\n", AssertionError, "doctest failed"),
    ],
)
def test_a_failing_block_check_or_doctest_fails_the_page(
    text: str, error: type[BaseException], message: str | None
) -> None:
    with pytest.raises(error, match=message):
        snippets.run_page(snippets.parse(text, "page.md"))


def test_a_check_may_take_the_warnings_the_text_expects() -> None:
    text = (
        "```python\nimport warnings\nwarnings.warn('careful')\n```\n"
        "<!-- check:\nassert str(warned[0].message) == 'careful'\nwarned.clear()\n-->\n"
    )
    assert snippets.run_page(snippets.parse(text, "page.md")) == []


def test_a_traceback_points_at_the_line_of_the_page() -> None:
    text = "Text.\n\n```python\nx = 1\nraise KeyError(x)\n```\n"
    with pytest.raises(KeyError) as info:
        snippets.run_page(snippets.parse(text, "page.md"))
    assert info.traceback[-1].lineno + 1 == 5


SCRIPT_PAGE = """\
Text.

<!-- script: python -->
<!-- setup: import multiprocessing -->
```python
def square(x):
    return x * x


if __name__ == "__main__":  # a spawned child imports square from the script's file
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        squares = pool.map(square, [1, 2, 3])
    print("done")
```
<!-- check:
assert squares == [1, 4, 9]
assert __file__.endswith("page_md_5.py")
-->

```python
print("the page goes on")
```
<!-- check: assert printed == "the page goes on\\n" and "squares" not in dir() -->
"""


def test_a_script_block_runs_as_a_file_of_its_own_with_its_setup_and_checks() -> None:
    page = snippets.parse(SCRIPT_PAGE, "page.md")
    assert snippets.run_page(page) == []
    assert Path("page_md_5", "page_md_5.py").is_file()


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("x = 1\n```\n<!-- check: assert x == 2 -->", 'page_md_3.py", line 6, in <module>'),
        ("import warnings\nwarnings.warn('careful')\n```", "UserWarning: careful"),
        ("raise SystemExit(3)\n```", "exited with 3"),
    ],
)
def test_a_script_that_fails_its_check_warns_or_exits_non_zero_fails_the_page(
    code: str, message: str
) -> None:
    text = f"Text.\n<!-- script: python -->\n```python\n{code}\n"
    with pytest.raises(AssertionError, match=r"page\.md:3: the script \(python\)") as info:
        snippets.run_page(snippets.parse(text, "page.md"))
    assert message in str(info.value)


def test_a_script_that_rerun_if_accepts_runs_again_from_a_new_directory() -> None:
    code = (
        "import os, pathlib\n"
        "assert not os.path.exists('left.txt')  # written by the first run\n"
        "pathlib.Path('left.txt').touch()\n"
        "runs = pathlib.Path('../runs')\n"
        "runs.write_text(runs.read_text() + 'x' if runs.exists() else 'x')\n"
        "if runs.read_text() == 'x':\n"
        "    raise SystemExit(3)\n"
    )
    page = snippets.parse(f"<!-- script: python -->\n```python\n{code}```\n", "page.md")
    snippets.run_page(page, rerun_if=lambda process: process.returncode == 3)
    assert Path("runs").read_text() == "xx"
    Path("runs").unlink()
    with pytest.raises(AssertionError, match="exited with 3"):  # without rerun_if: once
        snippets.run_page(page)


@pytest.mark.parametrize(
    ("target", "signature", "message"),
    [
        ("textwrap.indent", "indent(text, prefix, predicate=None)", None),
        ("json.JSONEncoder.encode", "encode(o)", None),  # self aside
        ("textwrap.indent", "indent(text, prefix, predicate=False)", "default bool False"),
        ("textwrap.indent", "indent(text, *, prefix, predicate=None)", "keyword-only"),
        ("textwrap.indent", "indent(text, prefix)", "shown:  text"),
        ("textwrap.no_such_name", "f(x)", "textwrap.no_such_name does not exist"),
        ("textwrap.indent", "indent(text, prefix)\nindent(text)", "not a signature"),
    ],
)
def test_a_signature_block_is_compared_with_the_object(
    target: str, signature: str, message: str | None
) -> None:
    text = f"<!-- signature: {target} -->\n```python\n{signature}\n```\n"
    page = snippets.parse(text, "page.md")
    if message is None:
        assert snippets.run_page(page) == []
    else:
        with pytest.raises(AssertionError, match=r"page\.md:2: ") as info:
            snippets.run_page(page)
        assert message in str(info.value)


def test_a_block_that_requires_a_service_runs_only_where_the_runner_provides_it() -> None:
    text = "<!-- requires: s3 -->\n```python\nran = True\n```\n<!-- check: assert ran -->\n"
    page = snippets.parse(text, "page.md")
    assert page.blocks[0].skip_reason() == "needs a local S3 server (AWS_ENDPOINT_URL)"
    assert snippets.run_page(page) == page.blocks
    assert page.blocks[0].skip_reason(("s3",)) is None
    assert snippets.run_page(page, ("s3",)) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- script: torchrun -->\n```python\npass\n```\n", "unknown launcher 'torchrun'"),
        ("<!-- script: mpirun 2 -->\n```python\npass\n```\n", "unknown launcher 'mpirun 2'"),
        (
            "<!-- script: python -->\n<!-- script: python -->\n```python\npass\n```\n",
            "more than one 'script' marker",
        ),
        (
            "<!-- signature: a.b -->\n```python\nb(x)\n```\n<!-- check: assert True -->\n",
            "a signature block takes no check",
        ),
        (
            "<!-- signature: a.b -->\n<!-- setup: x = 1 -->\n```python\nb(x)\n```\n",
            "a signature block takes no setup",
        ),
    ],
)
def test_misused_script_and_signature_markers_are_errors(text: str, message: str) -> None:
    with pytest.raises(snippets.MarkerError, match=message):
        snippets.parse(text, "page.md")
