"""Load and fully evaluate a ``pytorch_pfn_extras.config.Config``, from 1,000 to 100,000 nodes.

Every tenth node starts a group of ten: a dict holding an int, a string, a float, a typed
object ``{type: Point, x, y}`` (four nodes), a reference to another group's object, absolute
(shared instance, or one of its attributes), and a relative reference: 10,000 nodes hold 2,000
references and 1,000 typed objects. The script checks that each object was built exactly once
(no re-evaluation of shared references) and prints, per size, the time to load the JSON file
and to evaluate everything, the time per node, and the growth against the previous size
(linear growth: x10 per x10 nodes). Target: under 0.5 s for 10,000 nodes.

Usage: ``python benchmarks/config_eval.py [--repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from typing import Any

from pytorch_pfn_extras.config import Config

SIZES = (1_000, 10_000, 100_000)


class Point:
    built = 0
    __slots__ = ("x", "y")

    def __init__(self, x: float, y: float) -> None:
        Point.built += 1
        self.x = x
        self.y = y


def make_config(n_nodes: int, seed: int = 0) -> dict[str, Any]:
    """A tree of ``n_nodes`` nodes (the root and its list are two more)."""
    rng = random.Random(seed)
    n_groups = n_nodes // 10
    groups = []
    for i in range(n_groups):
        j = rng.randrange(n_groups)
        target = f"@/groups/{j}/point" + (".x" if i % 2 else "")
        groups.append(
            {
                "id": i,
                "name": f"group{i}",
                "scale": rng.random(),
                "point": {"type": "Point", "x": rng.random(), "y": rng.random()},
                "shared": target,
                "label": "@name",
            }
        )
    return {"groups": groups}


def count_nodes(tree: Any) -> tuple[int, int, int]:
    """(nodes, references, typed objects) of a raw tree."""
    if isinstance(tree, dict):
        counts = [count_nodes(v) for v in tree.values()]
        typed = int("type" in tree)
    elif isinstance(tree, list):
        counts = [count_nodes(v) for v in tree]
        typed = 0
    else:
        return 1, int(isinstance(tree, str) and tree.startswith("@")), 0
    return (
        1 + sum(c[0] for c in counts),
        sum(c[1] for c in counts),
        typed + sum(c[2] for c in counts),
    )


def measure(path: str, repeats: int) -> tuple[float, float]:
    """Best-of-``repeats`` seconds to load the file and to evaluate ``/``."""
    load_times, eval_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        config = Config.load_path(path, types={"Point": Point})
        t1 = time.perf_counter()
        Point.built = 0
        value = config["/"]
        t2 = time.perf_counter()
        expected = len(value["groups"])
        if Point.built != expected:
            message = f"{Point.built} Point objects built for {expected} typed nodes"
            raise AssertionError(message)
        load_times.append(t1 - t0)
        eval_times.append(t2 - t1)
    return min(load_times), min(eval_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'nodes':>8} {'refs':>7} {'typed':>6} {'load s':>8} {'eval s':>8} {'total s':>8} "
        f"{'us/node':>8} {'growth':>7}"
    )
    previous: tuple[int, float] | None = None
    with tempfile.TemporaryDirectory() as directory:
        for size in SIZES:
            tree = make_config(size)
            nodes, refs, typed = count_nodes(tree)
            path = os.path.join(directory, f"config_{size}.json")
            with open(path, "w", encoding="utf-8") as stream:
                json.dump(tree, stream)
            load, evaluate = measure(path, args.repeats if size < 100_000 else 3)
            total = load + evaluate
            growth = "" if previous is None else f"x{total / previous[1]:.1f}"
            print(
                f"{nodes:>8} {refs:>7} {typed:>6} {load:>8.4f} {evaluate:>8.4f} {total:>8.4f} "
                f"{1e6 * total / nodes:>8.2f} {growth:>7}"
            )
            previous = (nodes, total)
    print("each typed object was built exactly once; target: < 0.5 s at 10,000 nodes, x10 per x10")


if __name__ == "__main__":
    main()
