"""export_testcase against torch.onnx.export plus writing the tensors, on a ResNet-18.

Builds a ResNet-18-sized network in code (11.7M parameters, no weights download), then times
(median of ``--repeats``):

- baseline: ``torch.onnx.export(..., dynamo=False)`` to a file, one forward pass for the
  outputs, and the input and output written as TensorProtos;
- ``ppe.onnx.export_testcase`` (defaults: meta.json and the phase trace included);
- ``export_testcase(..., strip_large_tensor_data=True)``;

and prints the ratio (target: export_testcase no slower than the baseline, ratio <= 1.0 within
noise) and the sizes of ``model.onnx`` with and without stripping.

Usage: ``python benchmarks/onnx_export.py [--repeats 3] [--batch 1]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from onnx import numpy_helper

import pytorch_pfn_extras.onnx as ppe_onnx


class Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = (
            torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout)
            )
            if stride != 1 or cin != cout
            else torch.nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.down(x))


def resnet18(classes: int = 1000) -> torch.nn.Module:
    layers: list[torch.nn.Module] = [
        torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(512, classes)]
    return torch.nn.Sequential(*layers).eval()


def _write(path: str, tensor: torch.Tensor) -> None:
    with open(path, "wb") as file:
        file.write(numpy_helper.from_array(tensor.detach().numpy()).SerializeToString())


def baseline(model: torch.nn.Module, x: torch.Tensor, out_dir: str) -> None:
    os.makedirs(os.path.join(out_dir, "test_data_set_0"), exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (x,), os.path.join(out_dir, "model.onnx"), dynamo=False, input_names=["input_0"]
        )
    with torch.no_grad():
        y = model(x)
    _write(os.path.join(out_dir, "test_data_set_0", "input_0.pb"), x)
    _write(os.path.join(out_dir, "test_data_set_0", "output_0.pb"), y)


def _median_time(fn: Callable[[str], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            fn(os.path.join(tmp, "case"))
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = resnet18()
    x = torch.randn(args.batch, 3, 224, 224)
    params = sum(p.numel() for p in model.parameters())
    base = _median_time(lambda d: baseline(model, x, d), args.repeats)
    ours = _median_time(lambda d: ppe_onnx.export_testcase(model, x, d), args.repeats)
    slim = _median_time(
        lambda d: ppe_onnx.export_testcase(model, x, d, strip_large_tensor_data=True), args.repeats
    )
    with tempfile.TemporaryDirectory() as tmp:
        ppe_onnx.export_testcase(model, x, os.path.join(tmp, "full"))
        ppe_onnx.export_testcase(model, x, os.path.join(tmp, "slim"), strip_large_tensor_data=True)
        full_size = os.path.getsize(os.path.join(tmp, "full", "model.onnx"))
        slim_size = os.path.getsize(os.path.join(tmp, "slim", "model.onnx"))
    print(f"ResNet-18-sized model: {params / 1e6:.1f}M parameters, input {tuple(x.shape)}")
    print(f"torch.onnx.export + tensors : {base:.3f} s")
    print(f"export_testcase             : {ours:.3f} s  (ratio {ours / base:.2f})")
    print(f"export_testcase, stripped   : {slim:.3f} s  (ratio {slim / base:.2f})")
    print(f"model.onnx: {full_size / 1e6:.1f} MB, stripped: {slim_size / 1e3:.1f} kB")


if __name__ == "__main__":
    main()
