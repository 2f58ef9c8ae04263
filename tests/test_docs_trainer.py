"""Every Python block of docs/trainer.md runs as written, and its GAN example learns.

The blocks run in order in one namespace (later blocks reuse what earlier ones defined), in a
temporary working directory (the trainers write ``result/`` and snapshots there). A block right
after a ``<!-- doc-test: skip -->`` line is not run; keep those rare.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "trainer.md"
SKIP = "<!-- doc-test: skip -->"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Return (line number, code) of each ```python block not marked to be skipped."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        preceding = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if preceding.strip() == SKIP:
            continue
        line = text.count("\n", 0, match.start()) + 2  # the first line of code
        blocks.append((line, match.group(1)))
    return blocks


def test_the_extractor_finds_blocks_and_honours_the_skip_marker() -> None:
    text = f"a\n```python\nx = 1\n```\n{SKIP}\n```python\nraise SystemExit\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n")]


@pytest.fixture
def namespace(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run every block of the page in ``tmp_path``; return the namespace they leave."""
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) >= 8, "docs/trainer.md lost its examples?"
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {"__name__": "docs_trainer"}
    for line, code in blocks:
        compiled = compile(code, f"{PAGE}:{line}", "exec")  # tracebacks show the page's line
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compiled, scope)
    return scope


@pytest.mark.slow
# The crash-and-resume example says that its resumed run warns about the crashed run's extension.
@pytest.mark.filterwarnings(
    r"ignore:the snapshot has state for the extensions \['crash'\]:UserWarning"
)
def test_every_block_of_the_trainer_page_runs_and_the_gan_learns(
    namespace: dict[str, Any],
) -> None:
    before, after, real_mean = namespace["before"], namespace["after"], namespace["real_mean"]
    # The generator starts near 0 and ends near the real data's mean of 4.
    assert abs(after - real_mean) < abs(before - real_mean) / 4, (before, after)
    log = namespace["trainer"].manager.get_extension("LogReport").log
    assert [entry["epoch"] for entry in log] == list(range(1, 11))
    assert abs(log[-1]["val/fake_mean"] - real_mean) < 1.0
