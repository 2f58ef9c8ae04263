"""Strip the data of large tensors from an ONNX file.

Usage: ``python -m pytorch_pfn_extras.onnx.strip_large_tensor MODEL.onnx [--out_onnx_path OUT]``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from pytorch_pfn_extras.onnx._strip import LARGE_TENSOR_DATA_THRESHOLD, is_large_tensor, strip_model

__all__ = ["LARGE_TENSOR_DATA_THRESHOLD", "is_large_tensor"]


def _strip_file(path: str, out_path: str, threshold: int) -> int:
    from pytorch_pfn_extras.onnx.load import load_model

    onnx_model = load_model(path)
    count = strip_model(onnx_model, threshold)
    import onnx

    onnx.save(onnx_model, out_path or path)
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytorch_pfn_extras.onnx.strip_large_tensor",
        description="Strip the data of large tensors from ONNX models (for benchmarks: the "
        "shapes and dtypes stay; unstrip_tensor puts random data of the same statistics back).",
    )
    parser.add_argument("onnx_paths", nargs="+", help="ONNX model files to strip")
    parser.add_argument(
        "--out_onnx_path",
        default="",
        help="where to write the stripped model (one input only; default: overwrite the input)",
    )
    parser.add_argument(
        "--large_tensor_threshold",
        type=int,
        default=LARGE_TENSOR_DATA_THRESHOLD,
        help="strip tensors with more elements than this (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.out_onnx_path and len(args.onnx_paths) > 1:
        parser.error("--out_onnx_path needs exactly one input model")
    for path in args.onnx_paths:
        if not os.path.isfile(path):
            parser.error(f"no such ONNX file: {path}")
        count = _strip_file(path, args.out_onnx_path, args.large_tensor_threshold)
        print(f"{path}: stripped {count} tensors -> {args.out_onnx_path or path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
