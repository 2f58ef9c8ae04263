"""Every use of torch.onnx (and of the tracer's graph) by ppe-onnx lives in this package.

The torch ONNX exporter changes between releases (torch 2.9 made the torch.export-based exporter
the default and deprecated the TorchScript-based one); when it moves again, this package is the
one to change. Tested with torch 2.13 and its TorchScript-based exporter (``dynamo=False``),
whose default opset is 20, which is what PPE 0.9 used ("torch-onnx-utils").

How the helpers reach into an export, all of it inert outside one:

- ``_exporter``: the exporter's call (:func:`export_to_bytes`), inside ppe-onnx's hooks.
- ``_hooks``: the hooks, wrappers of four exporter functions that finish what the helpers
  marked in the traced graph, installed only for the duration of a ppe-onnx export
  (:func:`exporter_hooks`) and put back when it returns or raises; a ``torch.onnx.export``
  called directly, before or after one, runs torch's exporter untouched.
- ``_annotations``: annotated nodes, anchors and extra outputs, marked while the model is
  traced (the helpers record only in a ppe-onnx export: :func:`records`).
- ``_gradient``: the ONNX ``Gradient`` node of :func:`gradient`.
- ``_control_flow``: ``prim::Loop`` / ``prim::If`` nodes traced for ``lax``; the exporter
  turns them into ONNX ``Loop`` / ``If`` without hooks.
- ``_graph``: the traced graph, node attributes and the running export's state.
- ``_registry``: the exporter's registry of symbolic functions.

``torch.onnx._internal`` is imported at the first export, so that importing this package stays
cheap.
"""

from __future__ import annotations

from pytorch_pfn_extras.onnx._torch_onnx._annotations import (
    NodeSpan,
    anchor,
    annotate_nodes,
    drop_anchor,
    mark_output,
    new_anchor_pair,
)
from pytorch_pfn_extras.onnx._torch_onnx._control_flow import (
    LoopBody,
    check_tensors,
    trace_if,
    trace_loop,
)
from pytorch_pfn_extras.onnx._torch_onnx._exporter import (
    EXPORTER,
    export_mode,
    export_to_bytes,
)
from pytorch_pfn_extras.onnx._torch_onnx._gradient import GRADIENT_DOMAIN, gradient
from pytorch_pfn_extras.onnx._torch_onnx._graph import (
    AttrValue,
    check_attrs,
    in_export,
    untraced,
)
from pytorch_pfn_extras.onnx._torch_onnx._hooks import exporter_hooks, hooked, records
from pytorch_pfn_extras.onnx._torch_onnx._registry import (
    get_registered_op,
    is_registered_op,
    register_op,
)

__all__ = [
    "EXPORTER",
    "GRADIENT_DOMAIN",
    "AttrValue",
    "LoopBody",
    "NodeSpan",
    "anchor",
    "annotate_nodes",
    "check_attrs",
    "check_tensors",
    "drop_anchor",
    "export_mode",
    "export_to_bytes",
    "exporter_hooks",
    "get_registered_op",
    "gradient",
    "hooked",
    "in_export",
    "is_registered_op",
    "mark_output",
    "new_anchor_pair",
    "records",
    "register_op",
    "trace_if",
    "trace_loop",
    "untraced",
]
