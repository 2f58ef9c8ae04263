"""ppe-onnx's hooks in torch's TorchScript-based exporter, installed only during its exports.

:func:`exporter_hooks` wraps five functions of the exporter on entry and puts the originals
back on exit (also when the export raises):

- ``_run_symbolic_function`` (the symbolic dispatch): annotates the ONNX nodes it makes;
- ``_get_named_param_dict``: records which graph inputs are parameters;
- ``torch._C._jit_pass_onnx_assign_output_shape``: runs without the extra outputs;
- ``torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value`` (the naming pass, which
  runs last): gives marked nodes their names, moves the extra outputs behind the model's own
  outputs, writes the final value names into the ``Gradient`` nodes, and removes the markers.
- ``torch._C.Graph._export_onnx`` (the serialization): strips or keeps the nodes' doc strings
  as the export asked (``strip_doc_string``).

The blocks nest: the hooks go in when the first opens and out when the last closes, so an
export inside an export (a ``custom_exporter`` calling ppe-onnx's export) keeps them. They are
module attributes, so while a ppe-onnx export runs other threads see them too; they act only
in the threads inside a block and pass everything through in the others. Two exports must
still not run at the same time: torch's tracer and exporter are not thread safe.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from pytorch_pfn_extras.onnx._torch_onnx._annotations import (
    run_symbolic_function_with_annotations,
)
from pytorch_pfn_extras.onnx._torch_onnx._gradient import finish_gradients
from pytorch_pfn_extras.onnx._torch_onnx._graph import (
    ONNX_NAME,
    RUNNING,
    TAG_ANNOTATION,
    TAG_GRADIENT_Y,
    TAG_KEEP_IDENTITY,
    TAG_NAME,
    TAG_OUTPUT,
    all_nodes,
    in_export,
)


def _finish_graph(graph: torch._C.Graph) -> None:
    """Name the marked nodes, move the extra outputs last, remove every marker attribute."""
    if RUNNING.state is not None and RUNNING.state.n_gradients:
        finish_gradients(graph)
    extra: list[tuple[torch._C.Value, torch._C.Node]] = []
    for node in list(all_nodes(graph)):
        if node.hasAttribute(TAG_ANNOTATION):
            node.removeAttribute(TAG_ANNOTATION)
        if node.hasAttribute(TAG_NAME):
            node.s_(ONNX_NAME, node.s(TAG_NAME))
            node.removeAttribute(TAG_NAME)
        if node.hasAttribute(TAG_OUTPUT):
            extra.append((node.output(), node))
    if not extra:
        return
    outputs = list(graph.outputs())
    extra_ids = {id(value) for value, _ in extra}
    for i in reversed(range(len(outputs))):
        if id(outputs[i]) in extra_ids:
            graph.eraseOutput(i)
    for value, node in extra:
        name = node.s(TAG_OUTPUT)
        keep = bool(node.i(TAG_KEEP_IDENTITY))
        node.removeAttribute(TAG_OUTPUT)
        node.removeAttribute(TAG_KEEP_IDENTITY)
        if not keep:
            source = node.input()
            value.replaceAllUsesWith(source)
            node.destroy()
            value = source
        value.setDebugName(name)
        graph.registerOutput(value)


def _is_extra_output(value: torch._C.Value) -> bool:
    node = value.node()
    return bool(node.hasAttribute(TAG_OUTPUT) or node.hasAttribute(TAG_GRADIENT_Y))


def _extra_outputs_set_aside(original: Callable[..., None], graph: Any, *args: Any) -> None:
    """Run the pass that matches the graph outputs to PyTorch's without the extra outputs."""
    outputs = list(graph.outputs())
    extra = [i for i, v in enumerate(outputs) if _is_extra_output(v)]
    for i in reversed(extra):
        graph.eraseOutput(i)
    try:
        original(graph, *args)
    finally:
        for i in extra:
            graph.registerOutput(outputs[i])


def _named_params_recorded(original: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    params = original(*args)
    RUNNING.param_names = set(params)
    return params


def _assign_names_then_finish(original: Callable[[torch._C.Graph], None], graph: Any) -> None:
    original(graph)
    if RUNNING.state is not None:
        try:
            _finish_graph(graph)
        finally:
            RUNNING.state = None


class _Hooks:
    """The hooks' bookkeeping: the originals they replace, the blocks open (all threads, this one)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.originals: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
        self.open = 0
        self.local = threading.local()  # .strip: strip_doc_string of each block open here

    def blocks(self) -> list[bool | None]:
        """The ``strip_doc_string`` of each block open in this thread, the innermost last."""
        if not hasattr(self.local, "strip"):
            self.local.strip = []
        blocks: list[bool | None] = self.local.strip
        return blocks


_HOOKS = _Hooks()


def hooked() -> bool:
    """Whether this thread runs inside :func:`exporter_hooks` (a ppe-onnx export)."""
    return bool(_HOOKS.blocks())


def _doc_strings_as_asked(original: Callable[..., Any], graph: Any, *args: Any) -> Any:
    """Serialize ``graph`` stripping (True) or keeping (False) the nodes' doc strings, their
    source locations, as the innermost export asked; torch 2.13 has no option for it and keeps
    them only with ``verbose=True`` (None leaves it at that)."""
    strip = _HOOKS.blocks()[-1]
    if strip is None:
        return original(graph, *args)
    # (params, opset, dynamic_axes, defer_weight_export, export_type, strip_doc_string, ...)
    return original(graph, *args[:5], strip, *args[6:])


def _gate(hook: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """A function calling ``hook(original, ...)`` in a thread inside :func:`exporter_hooks` and
    ``original(...)`` in the others (a function, so that it binds as a method too)."""

    def gated(*args: Any, **kwargs: Any) -> Any:
        if _HOOKS.blocks():
            return hook(original, *args, **kwargs)
        return original(*args, **kwargs)

    return gated


def _targets() -> list[tuple[Any, str, Callable[..., Any]]]:
    """(owner, attribute, hook) of each exporter function that ppe-onnx hooks into."""
    from torch.onnx._internal.torchscript_exporter import utils as ts_utils

    return [
        (ts_utils, "_run_symbolic_function", run_symbolic_function_with_annotations),
        (ts_utils, "_get_named_param_dict", _named_params_recorded),
        (torch._C, "_jit_pass_onnx_assign_output_shape", _extra_outputs_set_aside),
        (
            torch._C,
            "_jit_pass_onnx_assign_scoped_names_for_node_and_value",
            _assign_names_then_finish,
        ),
        (torch._C.Graph, "_export_onnx", _doc_strings_as_asked),
    ]


@contextlib.contextmanager
def exporter_hooks(strip_doc_string: bool | None = None) -> Iterator[None]:
    """Hook into torch's exporter for the block; the originals are back after it (see above).

    ``strip_doc_string``: strip (True) or keep (False) the nodes' doc strings in the models
    exported in the block; None leaves them to the exporter (kept only with ``verbose``).
    """
    with _HOOKS.lock:
        if _HOOKS.open == 0:
            # every original first: a torch without one of them gets no hook at all
            targets = [
                (owner, name, hook, getattr(owner, name)) for owner, name, hook in _targets()
            ]
            for owner, name, hook, original in targets:
                setattr(owner, name, _gate(hook, original))
            _HOOKS.originals = [(owner, name, original) for owner, name, _, original in targets]
        _HOOKS.open += 1
    blocks = _HOOKS.blocks()
    blocks.append(strip_doc_string)
    try:
        yield
    finally:
        blocks.pop()
        with _HOOKS.lock:
            _HOOKS.open -= 1
            if _HOOKS.open == 0:
                for owner, name, original in reversed(_HOOKS.originals):
                    setattr(owner, name, original)
                _HOOKS.originals = []
                RUNNING.reset()


def records(helper: str, stacklevel: int) -> bool:
    """Whether ``helper`` (``"as_output"``, ...) records into the export running now.

    True in a ppe-onnx export; False outside an export, and, with a warning at ``stacklevel``
    (as the helper would give it to ``warnings.warn``), in an export ppe-onnx did not start
    (``torch.onnx.export`` called directly), whose exporter runs without ppe-onnx's hooks.
    """
    if not in_export():
        return False
    if hooked():
        return True
    message = (
        f"{helper}() does nothing in torch.onnx.export called directly; export with "
        "pytorch_pfn_extras.onnx.export or export_testcase, which hook into torch's exporter "
        "for the duration of the export"
    )
    warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
    return False
