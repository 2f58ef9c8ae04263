"""ppe-onnx installs as its own wheel and its subpackage imports without importing onnx."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def test_distribution_version_matches_the_version_file() -> None:
    from pytorch_pfn_extras.onnx._version import __version__

    assert importlib.metadata.version("ppe-onnx") == __version__


def test_importing_the_subpackage_does_not_import_onnx() -> None:
    code = "import sys, pytorch_pfn_extras.onnx; print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
