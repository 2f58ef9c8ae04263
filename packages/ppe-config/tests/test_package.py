"""ppe-config is pure Python: importing it loads nothing outside the standard library."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytorch_pfn_extras.config
from pytorch_pfn_extras.config._version import __version__


def test_distribution_version_matches_the_version_file() -> None:
    assert importlib.metadata.version("ppe-config") == __version__
    assert pytorch_pfn_extras.config.__version__ == __version__


def test_importing_config_and_config_types_needs_only_the_standard_library() -> None:
    # The interpreter runs without site-packages (-S) and with only the directory holding this
    # distribution's ``pytorch_pfn_extras`` on its path: an import of torch, numpy, yaml or
    # optuna (or of any other distribution) would fail.
    root = Path(pytorch_pfn_extras.config.__file__).parents[2]
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import pytorch_pfn_extras.config, pytorch_pfn_extras.config_types\n"
        "new = sorted(m.split('.')[0] for m in set(sys.modules) - before)\n"
        "print(' '.join(sorted(set(new) - set(sys.stdlib_module_names))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], check=True, capture_output=True, text=True, env=env
    )
    assert out.stdout.split() == ["pytorch_pfn_extras"]
