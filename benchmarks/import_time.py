"""Import cost of ``pytorch_pfn_extras`` on top of ``import torch``.

Each sample is a fresh interpreter; the script alternates the two commands and
prints the medians and their difference (target: under 0.15 s), plus which
heavy optional libraries the import dragged in (there must be none).

Usage: ``python benchmarks/import_time.py [--repeats 15]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HEAVY = (
    "matplotlib",
    "onnx",
    "onnxruntime",
    "ignite",
    "optuna",
    "slack_sdk",
    "tensorboard",
    "pandas",
    "ipywidgets",
    "cupy",
    "yaml",
    "torch._dynamo",
    "torch._inductor",
    "torch.onnx",
)

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
{extra}
t2 = time.perf_counter()
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"torch": t1 - t0, "extra": t2 - t1, "heavy": heavy}}))
"""


def sample(extra: str) -> dict[str, object]:
    code = PROBE.format(extra=extra, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    sample("import pytorch_pfn_extras")  # warm the file system cache
    ppe_costs: list[float] = []
    heavy: set[str] = set()
    torch_alone: list[float] = []
    for _ in range(args.repeats):
        with_ppe = sample("import pytorch_pfn_extras")
        ppe_costs.append(float(with_ppe["extra"]))  # type: ignore[arg-type]
        heavy.update(with_ppe["heavy"])  # type: ignore[arg-type]
        torch_alone.append(float(sample("")["torch"]))  # type: ignore[arg-type]
    cost = statistics.median(ppe_costs)
    print(
        f"import torch (median of {args.repeats} fresh processes): {statistics.median(torch_alone):.3f} s"
    )
    print(f"import pytorch_pfn_extras on top of torch:            {cost:.3f} s (target < 0.150 s)")
    print(f"heavy optional modules imported: {sorted(heavy) or 'none'}")


if __name__ == "__main__":
    main()
