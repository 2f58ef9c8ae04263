"""``annotate``, ``apply_annotation`` and ``scoped_anchor``: custom attributes and anchor nodes.

Each is a no-op outside an export of ppe-onnx (``export``, ``export_testcase``), so a model
keeps its annotations in its ``forward`` and trains as usual; in ``torch.onnx.export`` called
directly, which runs without ppe-onnx's hooks, each warns (``UserWarning``) and does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from pytorch_pfn_extras.onnx import _torch_onnx as internals

_T = TypeVar("_T")


class _TopLevelCalls:
    """Calls ``enter`` / ``exit`` around each module call made directly in a ``with`` block."""

    def __init__(
        self,
        enter: Callable[[torch.nn.Module, tuple[Any, ...]], Any],
        exit: Callable[[torch.nn.Module, Any], Any],
    ) -> None:
        self._enter = enter
        self._exit = exit
        self._depth = 0

    def _pre_hook(self, module: torch.nn.Module, args: tuple[Any, ...]) -> Any:
        self._depth += 1
        return self._enter(module, args) if self._depth == 1 else None

    def _hook(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        self._depth -= 1
        return self._exit(module, output) if self._depth == 0 else None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        pre = register_module_forward_pre_hook(self._pre_hook)
        post = register_module_forward_hook(self._hook)
        try:
            yield
        finally:
            pre.remove()
            post.remove()


@contextlib.contextmanager
def annotate(**attrs: Any) -> Iterator[None]:
    """Add ONNX attributes to the nodes of the modules called in the ``with`` block.

    Only the first computing node that each PyTorch operation of a module exports gets the
    attributes (``nn.Linear`` exports ``MatMul`` and ``Add``: the ``MatMul``). Functions called
    directly in the block (``F.relu``) are not annotated: use :func:`apply_annotation`. The
    attributes make the model invalid for ``onnx.checker``; outside an export nothing happens.

    Args:
        attrs: Attribute names and values: bool, int, float, str, or a list of one of them.

    Example:
        >>> with ppe.onnx.annotate(key="value"):  # doctest: +SKIP
        ...     h = self.conv2(h)
    """
    attrs = internals.check_attrs(attrs)
    if not internals.records("annotate", stacklevel=3):  # 3: the caller of `with`
        yield
        return
    spans: list[Any] = []

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        spans.append(internals.NodeSpan())

    def exit(module: torch.nn.Module, output: Any) -> None:
        internals.annotate_nodes(spans.pop().nodes(), attrs)

    with _TopLevelCalls(enter, exit).installed():
        yield


def apply_annotation(fn: Callable[..., _T], *args: Any, **attrs: Any) -> _T:
    """Call ``fn(*args)`` and add ONNX attributes to every operation it exports.

    Unlike :func:`annotate` this covers functions (``F.relu``) too; of an operation exported as
    several nodes, the first computing one gets the attributes.

    Args:
        fn: The function to call.
        args: Its positional arguments.
        attrs: Attribute names and values: bool, int, float, str, or a list of one of them.

    Returns:
        What ``fn`` returned.
    """
    attrs = internals.check_attrs(attrs)
    if not internals.records("apply_annotation", stacklevel=2):
        return fn(*args)
    span = internals.NodeSpan()
    result = fn(*args)
    internals.annotate_nodes(span.nodes(), attrs)
    return result


def _replace_first_tensor(value: Any, replace: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return replace(value)
    if isinstance(value, tuple | list):
        for i, item in enumerate(value):
            if isinstance(item, torch.Tensor):
                items = list(value)
                items[i] = replace(item)
                return type(value)(items) if isinstance(value, list) else tuple(items)
    return value


@contextlib.contextmanager
def scoped_anchor(**attrs: Any) -> Iterator[None]:
    """Mark the beginning and end of the modules called in the ``with`` block.

    The first input of the first module gets an ``Identity`` node named ``Anchor_N_start``, the
    first output of the last module one named ``Anchor_N_end``, both with ``attrs`` as ONNX
    attributes; ``N`` counts the anchor pairs of the export from 0. Outside an export nothing
    happens.

    Args:
        attrs: Attribute names and values: bool, int, float, str, or a list of one of them.
    """
    attrs = internals.check_attrs(attrs)
    if not internals.records("scoped_anchor", stacklevel=3):  # 3: the caller of `with`
        yield
        return
    index = internals.new_anchor_pair()
    started = False
    last_end: list[int] = []

    def start(x: torch.Tensor) -> torch.Tensor:
        y, _ = internals.anchor(x, f"Anchor_{index}_start", attrs)
        return y

    def end(x: torch.Tensor) -> torch.Tensor:
        y, handle = internals.anchor(x, f"Anchor_{index}_end", attrs)
        for previous in last_end:
            internals.drop_anchor(previous)
        last_end[:] = [handle]
        return y

    def enter(module: torch.nn.Module, args: tuple[Any, ...]) -> Any:
        nonlocal started
        if started:
            return None
        started = True
        return _replace_first_tensor(args, start)

    def exit(module: torch.nn.Module, output: Any) -> Any:
        return _replace_first_tensor(output, end)

    with _TopLevelCalls(enter, exit).installed():
        yield


def init_annotate(model: torch.nn.Module, opset_ver: int) -> None:
    """Prepare annotations for an export of ``model`` at opset ``opset_ver``.

    Kept for PPE 0.9's API: annotations need no preparation here (ppe-onnx's export hooks into
    torch's exporter for the duration of each export); this does nothing.
    """
    del model, opset_ver
