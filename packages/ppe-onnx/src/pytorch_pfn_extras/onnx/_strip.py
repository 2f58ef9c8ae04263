"""Strip the data of large tensors from an ONNX model, and put (random) data back.

A stripped tensor keeps its name, shape and dtype; its data is gone, it is marked as external
data with an empty location, and its ``doc_string`` holds ``{"type": "stripped", "average": ...,
"variance": ...}`` so that :func:`unstrip` can fill it with data of the same statistics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from pytorch_pfn_extras.onnx._deps import require_onnx

LARGE_TENSOR_DATA_THRESHOLD = 100
"""Tensors with more elements than this are stripped by default."""

_STRIPPED = "stripped"
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def is_large_tensor(tensor: Any, threshold: int) -> bool:
    """Whether ``tensor`` (an ``onnx.TensorProto`` or a ``torch.Tensor``) has more than
    ``threshold`` elements."""
    if hasattr(tensor, "dims"):
        size = math.prod(int(d) for d in tensor.dims)
    else:
        size = int(tensor.numel())
    return size > threshold


def stripped_info(tensor: Any) -> dict[str, Any] | None:
    """The statistics a stripped tensor keeps, or None for a tensor that has its data."""
    if not tensor.doc_string.startswith("{"):
        return None
    try:
        info = json.loads(tensor.doc_string)
    except ValueError:
        return None
    if not isinstance(info, dict) or info.get("type") != _STRIPPED:
        return None
    return info


def iter_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of ``graph``: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from iter_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from iter_tensors(subgraph)


def _strippable(onnx: Any, tensor: Any, threshold: int) -> bool:
    return (
        tensor.data_location != onnx.TensorProto.EXTERNAL
        and tensor.data_type != onnx.TensorProto.STRING
        and is_large_tensor(tensor, threshold)
    )


def strip_model(model: Any, threshold: int = LARGE_TENSOR_DATA_THRESHOLD) -> int:
    """Strip, in place, the data of every tensor of ``model`` with more than ``threshold``
    elements; return how many were stripped."""
    onnx = require_onnx("strip_large_tensor")
    from onnx import numpy_helper

    count = 0
    for tensor in iter_tensors(model.graph):
        if not _strippable(onnx, tensor, threshold):
            continue
        array = numpy_helper.to_array(tensor).astype("float64")
        info = {"type": _STRIPPED, "average": float(array.mean()), "variance": float(array.var())}
        for name in _DATA_FIELDS:
            tensor.ClearField(name)
        tensor.doc_string = json.dumps(info)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", ""
        count += 1
    return count


def unstrip_model(model: Any, seed: int = 0) -> int:
    """Fill, in place, every stripped tensor of ``model`` with normal random data of the kept
    average and variance; return how many were filled."""
    onnx = require_onnx("unstrip")
    import numpy

    from onnx import helper, numpy_helper

    rng = numpy.random.default_rng(seed)
    count = 0
    for tensor in iter_tensors(model.graph):
        info = stripped_info(tensor)
        if info is None:
            continue
        shape = tuple(int(d) for d in tensor.dims)
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        values = rng.normal(info["average"], math.sqrt(max(info["variance"], 0.0)), shape)
        if numpy.issubdtype(dtype, numpy.integer) or dtype == numpy.bool_:
            values = numpy.rint(values)
        filled = numpy_helper.from_array(values.astype(dtype), tensor.name)
        tensor.CopyFrom(filled)
        tensor.data_location = onnx.TensorProto.DEFAULT
        count += 1
    return count
