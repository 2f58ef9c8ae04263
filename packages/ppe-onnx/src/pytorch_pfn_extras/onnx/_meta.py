"""meta.json of a test case: when, where, how it was made, and the user's metadata."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytorch_pfn_extras.onnx._torch_onnx import EXPORTER

_VERSIONED = ("torch", "onnx", "onnxruntime", "ppe-core", "ppe-onnx")


def _versions() -> dict[str, str]:
    versions = {}
    for dist in _VERSIONED:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _git_info(start: Path) -> dict[str, str] | None:
    """The branch and commit of the git checkout holding ``start``, read from ``.git`` files."""
    for directory in (start, *start.parents):
        git = directory / ".git"
        if git.is_dir():
            break
    else:
        return None
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return {"commit": head}
        ref = head[len("ref: ") :]
        info = {"branch": ref.removeprefix("refs/heads/")}
        ref_file = git / ref
        if ref_file.is_file():
            info["commit"] = ref_file.read_text().strip()
        elif (git / "packed-refs").is_file():
            for line in (git / "packed-refs").read_text().splitlines():
                if line.endswith(" " + ref):
                    info["commit"] = line.split(" ", 1)[0]
        return info
    except OSError:
        return None


def write_meta(
    out_dir: str, *, strip_large_tensor_data: bool, user_meta: Mapping[str, Any] | None
) -> None:
    """Write ``meta.json`` into ``out_dir`` (PPE 0.9's keys, then versions and git)."""
    meta: dict[str, Any] = {
        "generated_at": datetime.datetime.now().isoformat(),
        "output_directory": out_dir,
        "exporter": EXPORTER,
        "strip_large_tensor_data": strip_large_tensor_data,
        "user_meta": dict(user_meta) if user_meta is not None else None,
        "versions": _versions(),
    }
    git = _git_info(Path.cwd())
    if git is not None:
        meta["git"] = git
    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as file:
        json.dump(meta, file, indent=2, default=str)
