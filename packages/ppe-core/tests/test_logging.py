from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytorch_pfn_extras.logging._logger as logger_state
from pytorch_pfn_extras.logging import get_logger


@pytest.fixture
def fresh_ppe_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    """Start from an unconfigured "ppe" logger, and restore it afterwards."""
    ppe = logging.getLogger("ppe")
    saved = (ppe.level, list(ppe.handlers))
    monkeypatch.setattr(logger_state, "_configured", False)
    monkeypatch.delenv("PPE_LOG_LEVEL", raising=False)
    monkeypatch.delenv("PPE_LOG_FILENAME", raising=False)
    yield ppe
    for handler in ppe.handlers:
        if handler not in saved[1]:
            handler.close()
    ppe.setLevel(saved[0])
    ppe.handlers[:] = saved[1]


def test_get_logger_returns_a_child_of_the_ppe_logger(fresh_ppe_logger: logging.Logger) -> None:
    logger = get_logger("training")
    assert logger.name == "ppe.training"
    assert logger.parent is fresh_ppe_logger
    assert get_logger("training") is logger


def test_default_level_is_error_and_root_logger_is_untouched(
    fresh_ppe_logger: logging.Logger,
) -> None:
    root = logging.getLogger()
    root_state = (root.level, list(root.handlers))
    get_logger("x")
    assert fresh_ppe_logger.level == logging.ERROR
    assert (root.level, list(root.handlers)) == root_state


@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("DEBUG", logging.DEBUG),
        ("info", logging.INFO),
        ("Warning", logging.WARNING),
        ("CRITICAL", logging.CRITICAL),
    ],
)
def test_ppe_log_level_sets_the_level(
    fresh_ppe_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, value: str, level: int
) -> None:
    monkeypatch.setenv("PPE_LOG_LEVEL", value)
    get_logger("x")
    assert fresh_ppe_logger.level == level


def test_invalid_ppe_log_level_falls_back_to_info_with_a_warning(
    fresh_ppe_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PPE_LOG_LEVEL", "LOUD")
    with pytest.warns(UserWarning, match="PPE_LOG_LEVEL='LOUD' is not a logging level"):
        get_logger("x")
    assert fresh_ppe_logger.level == logging.INFO


def test_ppe_log_filename_writes_records_to_the_file(
    fresh_ppe_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "ppe.log"
    monkeypatch.setenv("PPE_LOG_FILENAME", str(path))
    monkeypatch.setenv("PPE_LOG_LEVEL", "INFO")
    logger = get_logger("snapshot")
    logger.info("saved %s", "snapshot_iter_10")
    logger.debug("not written at INFO")
    for handler in fresh_ppe_logger.handlers:
        handler.flush()
    text = path.read_text()
    assert "INFO ppe.snapshot: saved snapshot_iter_10" in text
    assert "not written" not in text


def test_configuration_happens_once(
    fresh_ppe_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PPE_LOG_FILENAME", str(tmp_path / "ppe.log"))
    get_logger("a")
    get_logger("b")
    assert len(fresh_ppe_logger.handlers) == 1


@pytest.mark.parametrize("name", ["", None, 3])
def test_get_logger_rejects_invalid_names(name: object) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        get_logger(name)  # type: ignore[arg-type]


def test_logging_is_configured_lazily_in_a_fresh_interpreter(tmp_path: Path) -> None:
    log_file = tmp_path / "ppe.log"
    script = textwrap.dedent(
        """
        import logging, os
        import pytorch_pfn_extras.logging as ppe_logging
        ppe = logging.getLogger("ppe")
        assert ppe.level == logging.NOTSET and not ppe.handlers, "configured at import"
        assert not os.path.exists(os.environ["PPE_LOG_FILENAME"])
        logger = ppe_logging.get_logger("app")
        assert ppe.level == logging.WARNING
        assert logging.getLogger().handlers == [] and logging.getLogger().level == logging.WARNING
        logger.info("hidden")
        logger.warning("shown %d", 42)
        """
    )
    env = {**os.environ, "PPE_LOG_LEVEL": "WARNING", "PPE_LOG_FILENAME": str(log_file)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    text = log_file.read_text()
    assert "WARNING ppe.app: shown 42" in text
    assert "hidden" not in text


@pytest.mark.parametrize("name", ["CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING"])
def test_level_constants_are_the_standard_library_levels(name: str) -> None:
    import pytorch_pfn_extras.logging as ppe_logging

    assert getattr(ppe_logging, name) == getattr(logging, name)
    assert name in ppe_logging.__all__


def test_a_level_constant_sets_a_ppe_logger_level(fresh_ppe_logger: logging.Logger) -> None:
    import pytorch_pfn_extras.logging as ppe_logging

    logger = get_logger("levels")
    logger.setLevel(ppe_logging.DEBUG)
    assert logger.isEnabledFor(logging.DEBUG)
