"""Load ONNX models, stripped ones included."""

from __future__ import annotations

import os
from typing import IO, Any

from pytorch_pfn_extras.onnx._deps import require_onnx
from pytorch_pfn_extras.onnx._strip import iter_tensors, stripped_info

__all__ = ["load_model"]


def load_model(
    f: str | os.PathLike[str] | IO[bytes],
    format: Any = None,
    load_external_data: bool = True,
) -> Any:
    """Load an ONNX model as ``onnx.load`` does, also when large tensors were stripped.

    Args:
        f: A path or a binary file object.
        format: The serialization format, as for ``onnx.load``.
        load_external_data: Load tensors stored in external files (relative to the model's
            directory); stripped tensors stay empty.

    Example:
        >>> model = load_model("out/model.onnx")  # doctest: +SKIP
    """
    onnx = require_onnx("load_model")
    from onnx.external_data_helper import load_external_data_for_tensor

    model = onnx.load(f, format=format, load_external_data=False)
    if not load_external_data:
        return model
    base_dir = os.path.dirname(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else ""
    for tensor in iter_tensors(model.graph):
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if external and stripped_info(tensor) is None:
            load_external_data_for_tensor(tensor, base_dir)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
    return model
