"""export_testcase(check=True): run the exported model in onnxruntime and compare."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytorch_pfn_extras.onnx._deps import require_onnxruntime

RTOL = 1e-4
ATOL = 1e-5


def check_with_onnxruntime(
    model_data: bytes,
    feeds: dict[str, Any],
    expected: Sequence[Any],
    output_names: Sequence[str],
) -> None:
    """Raise if onnxruntime's outputs for ``feeds`` differ from ``expected`` (NumPy arrays),
    naming the output and the largest difference."""
    ort = require_onnxruntime("export_testcase(check=True)")
    import numpy

    session = ort.InferenceSession(model_data, providers=["CPUExecutionProvider"])
    actual = session.run(None, feeds)
    if len(actual) != len(expected):
        message = (
            f"onnxruntime gave {len(actual)} outputs, PyTorch {len(expected)}: "
            "the exported model does not match the module"
        )
        raise RuntimeError(message)
    for i, (got, want) in enumerate(zip(actual, expected)):
        name = output_names[i] if i < len(output_names) else str(i)
        got, want = numpy.asarray(got), numpy.asarray(want)
        if got.shape != want.shape:
            message = (
                f"output {i} ({name!r}): onnxruntime shape {got.shape}, PyTorch shape {want.shape}"
            )
            raise RuntimeError(message)
        if numpy.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            continue
        difference = numpy.abs(got.astype("float64") - want.astype("float64"))
        where = numpy.unravel_index(numpy.nanargmax(difference), difference.shape)
        message = (
            f"output {i} ({name!r}) of onnxruntime differs from PyTorch: largest difference "
            f"{difference[where]:.6g} at index {tuple(int(k) for k in where)} "
            f"(onnxruntime {got[where]!r}, PyTorch {want[where]!r}; rtol={RTOL}, atol={ATOL})"
        )
        raise RuntimeError(message)
