"""Put data back into the tensors that strip_large_tensor emptied.

The data is random, drawn with the average and variance each stripped tensor kept: enough for
runtimes that refuse tensors without data, and for benchmarks; not the original values.

Usage: ``python -m pytorch_pfn_extras.onnx.unstrip_tensor PATH [--out_path OUT]``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from pytorch_pfn_extras.onnx._strip import unstrip_model

__all__ = ["unstrip"]


def unstrip(path: str, out_path: str = "") -> None:
    """Fill the stripped tensors of an ONNX model with random data of their statistics.

    Args:
        path: An ONNX file, or a test case directory written by ``export_testcase`` (its
            ``model.onnx`` is unstripped).
        out_path: Where to write the result (a file, or a directory for a test case directory:
            its ``model.onnx``); ``''`` overwrites ``path``.

    Example:
        >>> unstrip("out/model.onnx", "out/model_unstripped.onnx")  # doctest: +SKIP
    """
    import onnx
    from pytorch_pfn_extras.onnx.load import load_model

    model_path = os.path.join(path, "model.onnx") if os.path.isdir(path) else path
    if not os.path.isfile(model_path):
        message = f"unstrip expects an ONNX file or a test case directory, got {path!r}"
        raise FileNotFoundError(message)
    target = out_path or model_path
    if out_path and os.path.isdir(path):
        os.makedirs(out_path, exist_ok=True)
        target = os.path.join(out_path, "model.onnx")
    model = load_model(model_path)
    unstrip_model(model)
    onnx.save(model, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytorch_pfn_extras.onnx.unstrip_tensor",
        description="Fill the tensors that strip_large_tensor emptied with random data of the "
        "average and variance they kept.",
    )
    parser.add_argument("path", help="an ONNX file or a test case directory (export_testcase)")
    parser.add_argument(
        "--out_path", default="", help="where to write the result (default: overwrite PATH)"
    )
    args = parser.parse_args(argv)
    unstrip(args.path, args.out_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
