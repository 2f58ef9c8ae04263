"""Symbolic functions in the registry of torch's TorchScript-based exporter.

:func:`register_op` adds to torch's registry for the whole process, as it is asked to (PPE 0.9's
``symbolic_registry.register_op``); nothing of torch is replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _qualified(opname: str, domain: str) -> str:
    return f"{domain or 'aten'}::{opname}"


def is_registered_op(opname: str, domain: str, version: int) -> bool:
    from torch.onnx._internal.torchscript_exporter import registration

    return bool(registration.registry.is_registered_op(_qualified(opname, domain), version))


def get_registered_op(opname: str, domain: str, version: int) -> Callable[..., Any]:
    from torch.onnx._internal.torchscript_exporter import registration

    group = registration.registry.get_function_group(_qualified(opname, domain))
    function = group.get(version) if group is not None else None
    if function is None:
        message = (
            f"no symbolic function is registered for {_qualified(opname, domain)!r} "
            f"at opset {version}"
        )
        raise KeyError(message)
    return function


def register_op(op_type: str, f: Callable[..., Any], domain: str, opset_version: int) -> None:
    from torch.onnx._internal.torchscript_exporter import utils as _ts_utils

    _ts_utils.register_custom_op_symbolic(_qualified(op_type, domain), f, opset_version)
