"""The PPE 0.9 module paths served by ppe-core's newer subpackages import with PPE's names."""

from __future__ import annotations

import importlib

import pytest

# From FEATURES.md, "Public module paths" (PPE 0.9.0's installed package).
PATHS = {
    "pytorch_pfn_extras.logging": ["CRITICAL", "DEBUG", "ERROR", "INFO", "WARNING", "get_logger"],
    "pytorch_pfn_extras.ops": ["OpDesc", "register"],
    "pytorch_pfn_extras.ops.register": ["OpDesc", "register"],
    "pytorch_pfn_extras.runtime": ["BaseRuntime", "PyTorchRuntime"],
    "pytorch_pfn_extras.testing": [],
    "pytorch_pfn_extras.torchscript": ["find_inplace", "run_jit_pass"],
}


@pytest.mark.parametrize(("path", "names"), list(PATHS.items()))
def test_module_path_imports_with_ppe_names(path: str, names: list[str]) -> None:
    module = importlib.import_module(path)
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []


def test_ops_register_is_both_a_module_and_the_function_as_in_ppe() -> None:
    import sys

    import pytorch_pfn_extras.ops

    module = sys.modules["pytorch_pfn_extras.ops.register"]
    assert pytorch_pfn_extras.ops.register is module.register
    assert callable(pytorch_pfn_extras.ops.register)


def test_testing_has_no_public_names() -> None:
    import pytorch_pfn_extras.testing

    assert pytorch_pfn_extras.testing.__all__ == []
