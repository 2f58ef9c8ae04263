"""PPE 0.9's public module paths and signatures under ``pytorch_pfn_extras.nn``."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

import pytorch_pfn_extras.nn as ppe_nn

# Module path -> the public names PPE 0.9 has there.
MODULE_PATHS = {
    "pytorch_pfn_extras.nn": [
        "Ensure",
        "ExtendedSequential",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
        "LazyConv1d",
        "LazyConv2d",
        "LazyConv3d",
        "LazyLinear",
        "ensure",
    ],
    "pytorch_pfn_extras.nn.modules": [],
    "pytorch_pfn_extras.nn.modules.ensure_shape": ["Ensure", "ensure"],
    "pytorch_pfn_extras.nn.modules.extended_sequential": ["ExtendedSequential"],
    "pytorch_pfn_extras.nn.modules.lazy": ["LazyInitializationMixin", "UninitializedParameter"],
    "pytorch_pfn_extras.nn.modules.lazy_batchnorm": [
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
    ],
    "pytorch_pfn_extras.nn.modules.lazy_conv": ["LazyConv1d", "LazyConv2d", "LazyConv3d"],
    "pytorch_pfn_extras.nn.modules.lazy_linear": ["LazyLinear"],
    "pytorch_pfn_extras.nn.parallel": ["DistributedDataParallel"],
    "pytorch_pfn_extras.nn.parallel.distributed": [
        "DistributedDataParallel",
        "get_foreach_wrapper",
    ],
}

# Callable -> its parameters in PPE 0.9 (``class`` entries give ``__init__``'s).
SIGNATURES = {
    "nn.Ensure": "self, *, shape=None, dtype=None, broadcastable=False, can_cast=False",
    "nn.Ensure.forward": "self, input",
    "nn.ExtendedSequential": "self, *args",
    "nn.ExtendedSequential.repeat": "self, n_repeat, mode='init'",
    "nn.LazyBatchNorm1d": "self, num_features, *args, **kwargs",
    "nn.LazyBatchNorm2d": "self, num_features, *args, **kwargs",
    "nn.LazyBatchNorm3d": "self, num_features, *args, **kwargs",
    "nn.LazyConv1d": "self, in_channels, *args, **kwargs",
    "nn.LazyConv2d": "self, in_channels, *args, **kwargs",
    "nn.LazyConv3d": "self, in_channels, *args, **kwargs",
    "nn.LazyLinear": "self, in_features, *args, **kwargs",
    "nn.LazyLinear.forward": "self, input",
    "nn.LazyLinear.reset_parameters": "self",
    "nn.ensure": "tensor, shape=None, dtype=None, broadcastable=False, can_cast=False",
    "nn.modules.lazy.LazyInitializationMixin": "self, *args, **kwargs",
    "nn.modules.lazy.LazyInitializationMixin.state_dict": "self, *args, **kwargs",
    "nn.modules.lazy.UninitializedParameter": "self, /, *args, **kwargs",
    "nn.modules.lazy.UninitializedParameter.materialize": "self, shape, device=None, dtype=None",
    "nn.modules.lazy.UninitializedParameter.share_memory_": "self",
    "nn.parallel.DistributedDataParallel": (
        "self, module, broadcast_buffers=True, negotiate_grads=True, process_group=None, "
        "reduce_function=None, broadcast_function=None, **kwargs"
    ),
    "nn.parallel.DistributedDataParallel.forward": "self, *args, **kwargs",
    "nn.parallel.DistributedDataParallel.load_state_dict": "self, state_dict, strict=True, *args",
    "nn.parallel.DistributedDataParallel.no_sync": "self",
    "nn.parallel.DistributedDataParallel.register_comm_hook": "self, hook",
    "nn.parallel.DistributedDataParallel.state_dict": "self",
    "nn.parallel.distributed.get_foreach_wrapper": "",
}


@pytest.mark.parametrize(("path", "names"), MODULE_PATHS.items())
def test_ppe_module_paths_import_with_their_names(path: str, names: list[str]) -> None:
    module = importlib.import_module(path)
    for name in names:
        assert name in module.__all__
        public = getattr(ppe_nn, name, None) or getattr(ppe_nn.parallel, name, None)
        if public is not None:
            assert getattr(module, name) is public  # the same object at every path
        else:
            assert getattr(module, name) is not None


def test_submodules_are_attributes_of_their_packages() -> None:
    assert ppe_nn.modules.lazy.LazyInitializationMixin is not None
    assert ppe_nn.parallel.distributed.get_foreach_wrapper is not None


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module("pytorch_pfn_extras." + ".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(path)


def _parameters(function: Any) -> str:
    signature = inspect.signature(function)
    bare = signature.replace(
        parameters=[
            parameter.replace(annotation=inspect.Parameter.empty)
            for parameter in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )
    return str(bare)[1:-1]


@pytest.mark.parametrize(("path", "expected"), SIGNATURES.items())
def test_signatures_match_ppe(path: str, expected: str) -> None:
    obj = _resolve(path)
    assert _parameters(obj.__init__ if inspect.isclass(obj) else obj) == expected
