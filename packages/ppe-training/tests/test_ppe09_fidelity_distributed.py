"""ppe.distributed's shares of a dataset and the DistributedEvaluators' progress bar, as in 0.9.

The samplers take ``num_replicas`` and ``rank`` explicitly, without a process group. The
progress bar test runs this module as the worker of two gloo ranks under torchrun:
``python -m torch.distributed.run --standalone --nproc-per-node 2
test_ppe09_fidelity_distributed.py OUT_DIR``; each rank writes what it printed and its
means to ``OUT_DIR/rank<r>.json``.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.runtime
from pytorch_pfn_extras.training import extensions

SIZES = [1, 5, 7, 10, 11, 16, 100]
REPLICAS = [1, 2, 3, 4, 7]


def _cases() -> list[tuple[int, int]]:
    return [(n, r) for n in SIZES for r in REPLICAS if n >= r]


@pytest.mark.parametrize(("n", "replicas"), _cases())
def test_unshuffled_training_subsets_are_ppes_windows(n: int, replicas: int) -> None:
    indices = list(range(n))
    for rank in range(replicas):
        start = n * rank // replicas
        expected = indices[start : start + math.ceil(n / replicas)]
        got = ppe.distributed.create_distributed_subset_indices(n, replicas, rank, shuffle=False)
        assert got == expected


def test_unshuffled_training_subsets_overlap_instead_of_wrapping_around() -> None:
    shares = [
        ppe.distributed.create_distributed_subset_indices(10, 4, rank, shuffle=False)
        for rank in range(4)
    ]
    assert shares == [[0, 1, 2], [2, 3, 4], [5, 6, 7], [7, 8, 9]]


@pytest.mark.parametrize(("n", "replicas"), _cases())
def test_shuffled_training_subsets_are_windows_of_one_permutation(n: int, replicas: int) -> None:
    shares = [
        ppe.distributed.create_distributed_subset_indices(n, replicas, rank, seed=3)
        for rank in range(replicas)
    ]
    share = math.ceil(n / replicas)
    assert all(len(s) == share for s in shares)
    counts = Counter(i for s in shares for i in s)
    assert set(counts) == set(range(n))
    assert max(counts.values()) <= 2
    # The same windows as without shuffling, over a permutation: rank r's window starts at
    # n * r // R, so consecutive windows agree where they overlap.
    for rank in range(replicas - 1):
        overlap = n * rank // replicas + share - n * (rank + 1) // replicas
        if overlap > 0:
            assert shares[rank][-overlap:] == shares[rank + 1][:overlap]


@pytest.mark.parametrize(("n", "replicas"), _cases())
def test_unshuffled_validation_shares_are_numpy_array_split_parts(n: int, replicas: int) -> None:
    parts = np.array_split(range(n), replicas)
    for rank in range(replicas):
        sampler = ppe.distributed.DistributedValidationSampler(
            range(n), replicas, rank, shuffle=False
        )
        assert list(sampler) == parts[rank].tolist()
        assert len(sampler) == len(parts[rank])


@pytest.mark.parametrize(("n", "replicas"), _cases())
def test_shuffled_validation_shares_are_consecutive_parts_of_one_permutation(
    n: int, replicas: int
) -> None:
    shares = [
        list(ppe.distributed.DistributedValidationSampler(range(n), replicas, rank, seed=5))
        for rank in range(replicas)
    ]
    assert sorted(i for s in shares for i in s) == list(range(n))
    assert [len(s) for s in shares] == [len(p) for p in np.array_split(range(n), replicas)]


# --- DistributedEvaluator(progress_bar=True) draws on rank 0 only ---------------------------


def _evaluator_output(loader: list[torch.Tensor]) -> tuple[str, dict[str, float]]:
    def eval_func(x: torch.Tensor) -> None:
        ppe.reporting.report({"val/x": x.mean()})

    evaluator = extensions.DistributedEvaluator(loader, {}, eval_func=eval_func, progress_bar=True)
    out = io.StringIO()
    reporter = ppe.reporting.Reporter()
    with contextlib.redirect_stdout(out), reporter, reporter.scope({}):
        result = evaluator()
    return out.getvalue(), {k: float(v) for k, v in result.items()}


class _ReportsTheMean(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        ppe.reporting.report({"val/x": x.mean()})
        return {"x": x}


def _engine_evaluator_output(loader: list[torch.Tensor]) -> tuple[str, dict[str, float]]:
    model = _ReportsTheMean()
    ppe.runtime.to(model, "cpu")
    evaluator = ppe.engine.create_evaluator(model, progress_bar=True, distributed=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        means = evaluator.run(loader)
    return out.getvalue(), {k: float(v) for k, v in means.items()}


def worker(out_dir: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    try:
        data = torch.arange(10.0)
        sampler = ppe.distributed.DistributedValidationSampler(data, shuffle=False)
        loader = list(torch.utils.data.DataLoader(data, batch_size=2, sampler=sampler))
        printed, means = _evaluator_output(loader)
        engine_printed, engine_means = _engine_evaluator_output(loader)
        result = {
            "printed": printed,
            "means": means,
            "engine_printed": engine_printed,
            "engine_means": engine_means,
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_distributed_evaluator_progress_bar_shows_on_rank_0_only(
    tmp_path: Path, torchrun: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    result = torchrun(2, __file__, str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert "validation [" in ranks[0]["printed"]
    assert "3/3 iterations" in ranks[0]["printed"]  # rank 0 holds 0..4: 3 batches
    assert ranks[1]["printed"] == ""
    assert ranks[0]["means"] == ranks[1]["means"] == {"val/x": 4.5}
    # the engine's (create_evaluator(distributed=True)) too
    assert "validation [" in ranks[0]["engine_printed"]
    assert ranks[1]["engine_printed"] == ""
    assert ranks[0]["engine_means"] == ranks[1]["engine_means"] == {"val/x": 4.5}


def test_distributed_evaluator_of_one_process_shows_its_progress_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(variable, raising=False)
    printed, means = _evaluator_output([torch.tensor([1.0, 3.0])])
    assert "validation [" in printed
    assert means == {"val/x": 2.0}


if __name__ == "__main__":
    worker(sys.argv[1])
