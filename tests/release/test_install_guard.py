"""The meta-package's import-time check for what an in-place upgrade from PPE 0.x leaves behind.

pip installs the new components, then removes the files of pytorch-pfn-extras 0.x, among them
the components' own ``__init__.py`` at the paths 0.x used too (scripts/check_index.py shows it
with real pip). These tests lay out such a site-packages folder by hand: the meta-package's own
files, a component's dist-info, and a subpackage folder that kept ``py.typed`` but lost its
``__init__.py``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
META_SRC = ROOT / "src" / "pytorch_pfn_extras"


def site_with_meta(tmp_path: pathlib.Path) -> pathlib.Path:
    site = tmp_path / "site"
    package = site / "pytorch_pfn_extras"
    package.mkdir(parents=True)
    for name in ("__init__.py", "_version.py", "py.typed"):
        shutil.copy2(META_SRC / name, package / name)
    return site


def add_component(site: pathlib.Path, dist: str, version: str, files: list[str]) -> None:
    """Write a dist-info whose RECORD lists ``files`` (as pip would), and the files."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    for file in files:
        (site / file).parent.mkdir(parents=True, exist_ok=True)
        (site / file).write_text("")


def import_from(site: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-c", "import pytorch_pfn_extras"],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_subpackage_that_lost_its_init_fails_the_import_naming_the_repair(
    tmp_path: pathlib.Path,
) -> None:
    site = site_with_meta(tmp_path)
    add_component(
        site,
        "ppe-dataset",
        "0.1.3",
        ["pytorch_pfn_extras/dataset/py.typed", "pytorch_pfn_extras/dataset/_version.py"],
    )
    result = import_from(site)
    assert result.returncode == 1
    error = result.stderr
    assert "ImportError: pytorch_pfn_extras is installed incompletely" in error
    assert str(site / "pytorch_pfn_extras" / "dataset") in error
    assert "pip install --force-reinstall --no-deps ppe-dataset==0.1.3\n" in error
    assert "pip uninstall -y pytorch-pfn-extras && pip install pytorch-pfn-extras" in error


def test_every_damaged_component_is_named_once_in_the_repair_command(
    tmp_path: pathlib.Path,
) -> None:
    site = site_with_meta(tmp_path)
    add_component(site, "ppe-dataset", "0.1.0", ["pytorch_pfn_extras/dataset/py.typed"])
    add_component(
        site,
        "ppe-training",
        "0.2.0",
        ["pytorch_pfn_extras/training/py.typed", "pytorch_pfn_extras/handler/py.typed"],
    )
    error = import_from(site).stderr
    assert (
        "pip install --force-reinstall --no-deps ppe-dataset==0.1.0 ppe-training==0.2.0\n" in error
    )
    for sub in ("dataset", "handler", "training"):
        assert f"\n    {site / 'pytorch_pfn_extras' / sub}\n" in error


def test_without_the_dist_info_the_repair_names_every_component(tmp_path: pathlib.Path) -> None:
    site = site_with_meta(tmp_path)
    (site / "pytorch_pfn_extras" / "nn").mkdir()
    (site / "pytorch_pfn_extras" / "nn" / "py.typed").write_text("")
    error = import_from(site).stderr
    assert (
        "pip install --force-reinstall --no-deps ppe-core ppe-training ppe-runtime-cuda"
        " ppe-onnx ppe-config ppe-dataset\n"
    ) in error


def test_folders_that_are_not_damaged_subpackages_pass(tmp_path: pathlib.Path) -> None:
    site = site_with_meta(tmp_path)
    # a whole subpackage, and a leftover folder of bytecode only (no py.typed)
    add_component(
        site,
        "ppe-dataset",
        "0.1.0",
        ["pytorch_pfn_extras/dataset/__init__.py", "pytorch_pfn_extras/dataset/py.typed"],
    )
    (site / "pytorch_pfn_extras" / "old" / "__pycache__").mkdir(parents=True)
    result = import_from(site)
    assert result.returncode == 0, result.stderr
