"""No source file of any distribution is over 500 lines: a file that grows past it holds more
than one concern and is split by concern (docs/architecture.md's rooms)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500


def test_no_source_file_is_over_500_lines() -> None:
    sources = [ROOT / "src", *sorted((ROOT / "packages").glob("*/src"))]
    files = [path for src in sources for path in sorted(src.rglob("*.py"))]
    assert len(files) > 100  # the sources were found
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in files
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not too_long, f"split these by concern (lines, limit {LIMIT}): {too_long}"
