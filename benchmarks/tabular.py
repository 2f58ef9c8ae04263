"""TabularDataset overhead against plain NumPy.

Fetches every row of a 1,000,000-row, 8-column float32 table through the chain
``slice -> transform_batch -> join -> slice`` and does the same work with NumPy directly, then
prints the median times and their ratio (target: TabularDataset within 1.5x of NumPy), and the
peak memory of each (tracemalloc; NumPy reports its buffers to it). Two variants of the last
slice: reversing the rows (a NumPy view) and a random permutation (a NumPy gather).

It also shows that memory follows the rows fetched, not the chain length (the same fetch through
1 and through 50 stacked slices), and, with ``--loader``, compares batches read through
``ppe.dataloaders.DataLoader`` and ``torch.utils.data.DataLoader``.

Usage: ``python benchmarks/tabular.py [--rows 1000000] [--repeats 7] [--loader]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from pytorch_pfn_extras.dataloaders import DataLoader
from pytorch_pfn_extras.dataset import tabular

N_COLUMNS = 8


def scale(*columns: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
    """The transform_batch step: 8 columns in, 8 columns out, vectorised."""
    return tuple(c * np.float32(2.0) + np.float32(1.0) for c in columns)


def peak_memory(function: Callable[[], Any]) -> int:
    """Peak traced memory while running ``function()``."""
    gc.collect()
    tracemalloc.start()
    result = function()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak


def measure(*functions: Callable[[], Any], repeats: int) -> list[tuple[float, int]]:
    """Median wall time and peak memory of each function; runs alternate to share machine noise."""
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(repeats):
        for function, samples in zip(functions, times):
            gc.collect()
            start = time.perf_counter()
            result = function()
            samples.append(time.perf_counter() - start)
            del result
    return [
        (statistics.median(samples), peak_memory(function))
        for function, samples in zip(functions, times)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loader", action="store_true", help="also compare DataLoaders")
    args = parser.parse_args()
    n = args.rows
    rng = np.random.default_rng(0)
    columns = [rng.random(n, dtype=np.float32) for _ in range(N_COLUMNS)]
    first = rng.permutation(n)  # all rows, shuffled
    labels = [rng.integers(0, 10, n), rng.random(n, dtype=np.float32)]
    last_variants = {"reverse": slice(None, None, -1), "permutation": rng.permutation(n)}
    out_keys = tuple(f"s{i}" for i in range(N_COLUMNS))

    source = tabular.from_data(tuple((f"c{i}", c) for i, c in enumerate(columns)))
    extra = tabular.from_data((("label", labels[0]), ("weight", labels[1])))
    fetched_bytes = n * (N_COLUMNS * 4 + 8 + 4)
    print(f"{n:,} rows x {N_COLUMNS} columns; output {fetched_bytes / 2**20:.1f} MiB")
    print(
        f"{'last slice':<12} {'numpy':>9} {'tabular':>9} {'ratio':>6} {'numpy peak':>11} {'tabular peak':>13}"
    )
    for name, last in last_variants.items():

        def with_numpy(last: Any = last) -> list[np.ndarray[Any, Any]]:
            picked = [c[first] for c in columns]
            scaled = scale(*picked)
            joined = [*scaled, *labels]
            return [c[last] for c in joined]

        def with_tabular(last: Any = last) -> tuple[Any, ...]:
            chain = source.slice[first].transform_batch(out_keys, scale).join(extra).slice[last]
            result: tuple[Any, ...] = chain.fetch()
            return result

        for a, b in zip(with_numpy(), with_tabular()):
            np.testing.assert_array_equal(a, b)
        (t_np, m_np), (t_tab, m_tab) = measure(with_numpy, with_tabular, repeats=args.repeats)
        print(
            f"{name:<12} {t_np * 1e3:>7.1f}ms {t_tab * 1e3:>7.1f}ms {t_tab / t_np:>6.2f} "
            f"{m_np / 2**20:>9.1f}Mi {m_tab / 2**20:>11.1f}Mi"
        )

    # Memory against chain length: the same rows through 1 and through 50 stacked slices.
    print("chain length vs peak memory of the fetch (same rows fetched):")
    for depth in (1, 50):
        view = source.slice[:, ("c0", "c1")]
        for _ in range(depth):
            view = view.slice[::-1]
        ((t, peak),) = measure(view.fetch, repeats=args.repeats)
        print(f"  {depth:>3} slices: {t * 1e3:7.2f}ms, peak {peak / 2**20:7.2f}Mi")
    for depth in (1, 50):
        view = source.slice[:, ("c0", "c1")]
        for _ in range(depth):
            view = view.slice[rng.permutation(len(view))]
        ((t, peak),) = measure(view.fetch, repeats=args.repeats)
        print(f"  {depth:>3} shuffles: {t * 1e3:6.2f}ms, peak {peak / 2**20:7.2f}Mi")

    if args.loader:
        loader_rows = min(n, 200_000)
        table = tabular.from_data({f"c{i}": c[:loader_rows] for i, c in enumerate(columns)})

        def epoch(loader_class: Any) -> int:
            loader = loader_class(table, batch_size=256, shuffle=True)
            return sum(len(batch["c0"]) for batch in loader)

        (t_ppe, _), (t_torch, _) = measure(
            lambda: epoch(DataLoader), lambda: epoch(torch.utils.data.DataLoader), repeats=3
        )
        print(
            f"DataLoader epoch over {loader_rows:,} rows, batch 256: ppe {t_ppe * 1e3:.0f}ms, "
            f"torch {t_torch * 1e3:.0f}ms ({t_torch / t_ppe:.1f}x)"
        )


if __name__ == "__main__":
    main()
