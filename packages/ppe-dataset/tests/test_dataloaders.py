"""dataloaders.DataLoader and dataloaders.utils.CollateAsDict."""

from __future__ import annotations

import inspect
import multiprocessing
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from pytorch_pfn_extras.dataloaders import DataLoader, dataloader
from pytorch_pfn_extras.dataloaders.utils import CollateAsDict
from pytorch_pfn_extras.dataset import TabularDataset, tabular

needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
fork_warning = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork\\(\\) may lead to deadlocks"
)


def assert_same(left: Any, right: Any) -> None:
    """Structural equality of collated batches, dtypes included."""
    assert type(left) is type(right)
    if isinstance(left, torch.Tensor):
        assert left.dtype == right.dtype
        assert left.shape == right.shape
        assert torch.equal(left, right)
    elif isinstance(left, dict):
        assert list(left) == list(right)
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            assert_same(a, b)
    else:
        assert left == right


def mixed_table(n: int = 10) -> TabularDataset:
    rng = np.random.default_rng(0)
    return tabular.from_data(
        {
            "f32": rng.random(n).astype(np.float32),
            "f64": rng.random(n),
            "i64": np.arange(n),
            "u8": np.arange(n, dtype=np.uint8),
            "flag": np.arange(n) % 2 == 0,
            "image": rng.random((n, 2, 3)).astype(np.float32),
            "tensor": torch.arange(2 * n).reshape(n, 2),
            "ints": list(range(n)),
            "floats": [float(i) / 3 for i in range(n)],
            "text": [f"s{i}" for i in range(n)],
            "strings": np.array([f"t{i}" for i in range(n)]),
        }
    )


@pytest.mark.parametrize("mode", ["dict", "tuple", "unary"])
def test_batches_equal_default_collate_of_examples(mode: str) -> None:
    table = mixed_table()
    if mode == "tuple":
        table = table.astuple()
    elif mode == "unary":
        table = table.slice[:, "image"]
    ours = list(DataLoader(table, batch_size=4, shuffle=False))
    reference = [
        default_collate([table[i] for i in range(s, min(s + 4, 10))]) for s in range(0, 10, 4)
    ]
    assert len(ours) == len(reference) == 3
    for a, b in zip(ours, reference):
        assert_same(a, b)


def test_batches_do_not_alias_the_dataset() -> None:
    source = np.arange(6.0)
    loader = DataLoader(tabular.from_data(("v", source)), batch_size=6)
    batch = next(iter(loader))
    batch += 1
    assert source.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_each_batch_is_fetched_in_one_call() -> None:
    class Counting(TabularDataset):
        calls: list[Any] = []

        def __len__(self) -> int:
            return 10

        @property
        def keys(self) -> tuple[str, ...]:
            return ("x",)

        @property
        def mode(self) -> Any:
            return tuple

        def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
            self.calls.append(indices)
            return (np.arange(10)[indices],)

    ds = Counting()
    batches = list(
        DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    )
    assert len(ds.calls) == 3
    assert sorted(torch.cat([b[0] for b in batches]).tolist()) == list(range(10))


def test_other_datasets_and_custom_collate_behave_like_torch() -> None:
    data = [torch.tensor([i, i + 1]) for i in range(5)]
    ours = list(DataLoader(data, batch_size=2))  # type: ignore[arg-type]
    theirs = list(torch.utils.data.DataLoader(data, batch_size=2))  # type: ignore[arg-type]
    for a, b in zip(ours, theirs):
        assert_same(a, b)
    table = tabular.from_data((("x", np.arange(4)), ("t", np.arange(4) * 2)))
    named = next(iter(DataLoader(table, batch_size=4, collate_fn=CollateAsDict(["x", "t"]))))
    assert named["t"].tolist() == [0, 2, 4, 6]
    unbatched = list(DataLoader(table, batch_size=None))
    assert len(unbatched) == 4
    assert_same(unbatched[1], torch.utils.data.default_convert(table[1]))


def double_x(x: Any, t: Any) -> tuple[Any, Any]:
    return x * 2, t


@needs_fork
@fork_warning
def test_worker_processes_give_the_same_batches() -> None:
    table = (
        mixed_table(40)
        .slice[:, ("i64", "image", "text")]
        .transform_batch(("i64", "image", "text"), lambda i64, image, text: (i64 * 2, image, text))
    )
    kwargs: dict[str, Any] = {"batch_size": 8, "shuffle": True}
    single = list(DataLoader(table, generator=torch.Generator().manual_seed(1), **kwargs))
    workers = list(
        DataLoader(
            table,
            generator=torch.Generator().manual_seed(1),
            num_workers=2,
            multiprocessing_context="fork",
            **kwargs,
        )
    )
    assert len(single) == len(workers) == 5
    for a, b in zip(single, workers):
        assert_same(a, b)


@needs_fork
@fork_warning
def test_plain_torch_dataloader_workers_read_tables() -> None:
    table = tabular.from_data((("x", np.arange(12.0)), ("t", list(range(12))))).transform(
        ("x", "t"), double_x
    )
    loader = torch.utils.data.DataLoader(
        table, batch_size=5, num_workers=2, multiprocessing_context="fork"
    )
    batches = list(loader)
    assert torch.cat([b[0] for b in batches]).tolist() == [2.0 * i for i in range(12)]
    assert torch.cat([b[1] for b in batches]).tolist() == list(range(12))


def test_collate_as_dict_names_the_collated_values() -> None:
    batch = [(torch.tensor(1.0), 2), (torch.tensor(3.0), 4)]
    result = CollateAsDict(["x", "t"])(batch)
    assert list(result) == ["x", "t"]
    assert result["x"].tolist() == [1.0, 3.0]
    assert result["t"].tolist() == [2, 4]
    reversed_first = CollateAsDict(("a", "b"), collate_fn=lambda b: [len(b), "second"])
    assert reversed_first(batch) == {"a": 2, "b": "second"}


def test_collate_as_dict_errors_name_the_mismatch() -> None:
    with pytest.raises(
        ValueError,
        match=r"CollateAsDict has 3 names \('x', 't', 'u'\) but the collated batch has 2 values",
    ):
        CollateAsDict(["x", "t", "u"])([(1, 2), (3, 4)])
    with pytest.raises(TypeError, match="names must be a sequence of str, got 'xt'"):
        CollateAsDict("xt")


def test_collate_as_dict_passes_every_argument_to_collate_fn() -> None:
    collate = CollateAsDict(["n", "extra"], collate_fn=lambda batch, extra: [len(batch), extra])
    assert collate([(1, 2), (3, 4)], extra=5) == {"n": 2, "extra": 5}


def test_dataloader_has_torchs_signature_at_ppes_module_paths() -> None:
    # PPE 0.9's DataLoader is torch's class: same parameters, by position and keyword.
    assert inspect.signature(DataLoader) == inspect.signature(torch.utils.data.DataLoader)
    assert dataloader.DataLoader is DataLoader
    loader = DataLoader(list(range(5)), 2, False, None, None, 0, None, False, True)  # drop_last
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]
