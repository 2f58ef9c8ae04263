"""``python -m pytorch_pfn_extras``: print what a bug report needs.

The version of every installed PPE component, of Python, torch and NumPy, and
of each optional dependency (``not installed`` where absent). Nothing here
imports torch or any optional library: versions come from package metadata.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

COMPONENTS = (
    "pytorch-pfn-extras",
    "ppe-core",
    "ppe-training",
    "ppe-runtime-cuda",
    "ppe-onnx",
    "ppe-config",
    "ppe-dataset",
)
REQUIRED = ("torch", "numpy")
OPTIONAL = (
    "pytorch-ignite",
    "matplotlib",
    "slack_sdk",
    "ipywidgets",
    "pandas",
    "pyyaml",
    "tensorboard",
    "cupy-cuda13x",
    "cupy-cuda12x",
    "cupy-cuda11x",
    "onnx",
    "onnxruntime",
    "optuna",
)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report() -> str:
    """Return the version report as text, one ``name: version`` line per package."""
    lines = [
        f"python: {platform.python_version()} ({sys.executable})",
        f"platform: {platform.platform()}",
    ]
    for title, names in (
        ("components", COMPONENTS),
        ("required", REQUIRED),
        ("optional", OPTIONAL),
    ):
        lines.append(f"[{title}]")
        width = max(len(n) for n in names)
        lines.extend(f"  {name:<{width}}  {_version(name)}" for name in names)
    return "\n".join(lines)


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
