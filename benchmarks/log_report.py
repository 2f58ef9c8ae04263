"""LogReport write cost against the length of the log, per format, and its memory.

A LogReport writes an entry every iteration of a real manager (``run_iteration()`` and
one reported scalar); the cost of a write is the mean time of an iteration in a window
around entry ~100 and around the last entry, minus nothing (an empty iteration costs a
few microseconds). Peak memory of the append mode is measured with tracemalloc.

    python benchmarks/log_report.py [iterations]
"""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions import LogReport

WINDOW = 200


def _run(filename: str, append: bool, iterations: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        manager = ExtensionsManager({}, {}, 10**9, iters_per_epoch=1000, out_dir=out)
        manager.extend(LogReport(filename=filename, append=append, trigger=(1, "iteration")))
        early = late = 0.0
        for i in range(1, iterations + 1):
            start = time.perf_counter()
            with manager.run_iteration():
                reporting.report({"loss": 1.0 / i})
            elapsed = time.perf_counter() - start
            if 100 <= i < 100 + WINDOW:
                early += elapsed
            elif i > iterations - WINDOW:
                late += elapsed
        return early / WINDOW * 1e6, late / WINDOW * 1e6


def _peak_mib(filename: str, iterations: int) -> float:
    tracemalloc.start()
    _run(filename, True, iterations)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(f"{iterations} iterations, one entry each; us per iteration (write included)")
    print(f"{'file':<10} {'append':<7} {'entry ~100':>11} {'last entries':>13} {'ratio':>6}")
    for filename, append in [
        ("log.json", False),
        ("log.jsonl", False),
        ("log.yaml", False),
        ("log.jsonl", True),
        ("log.yaml", True),
    ]:
        early, late = _run(filename, append, iterations)
        print(f"{filename:<10} {append!s:<7} {early:>11.1f} {late:>13.1f} {late / early:>6.2f}")
    for filename in ("log.jsonl", "log.yaml"):
        peak = _peak_mib(filename, iterations)
        print(f"peak traced memory, {filename} append=True: {peak:.1f} MiB")


if __name__ == "__main__":
    main()
