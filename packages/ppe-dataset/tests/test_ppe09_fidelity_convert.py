"""Every view converts as its source does (PPE 0.9): a subclass's ``convert`` holds through any
chain of slices, mode changes, transforms, concatenations and joins, and a DataLoader given
``collate_fn=view.convert`` collates with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from pytorch_pfn_extras.dataloaders import DataLoader
from pytorch_pfn_extras.dataset import TabularDataset, tabular


class Converted(NamedTuple):
    """What ``Points.convert`` returns: the data it was given, and who converted it."""

    by: TabularDataset
    data: Any


class Points(TabularDataset):
    """A user's table (``x[i] = i``, ``y[i] = 10 * i``) with a ``convert`` of its own."""

    def __len__(self) -> int:
        return 6

    @property
    def keys(self) -> tuple[str, ...]:
        return ("x", "y")

    @property
    def mode(self) -> Any:
        return tuple

    def get_examples(self, indices: Any, key_indices: Any) -> tuple[Any, ...]:
        data = np.stack([np.arange(6), np.arange(6) * 10])
        if indices is not None:
            data = data[:, indices]
        if key_indices is not None:
            data = data[list(key_indices)]
        return tuple(data)

    def convert(self, data: Any) -> Any:
        return Converted(self, data)


def plain(value: Any) -> Any:
    """Examples and columns with NumPy values -> Python values, for comparisons."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return value.tolist()
    return value.item() if hasattr(value, "item") else value


def other(n: int = 6) -> TabularDataset:
    """A table with the default ``convert``, keys ``x`` and ``y``."""
    return tabular.from_data((("x", np.arange(100, 100 + n)), ("y", np.arange(n))))


VIEWS: dict[str, Callable[[TabularDataset], TabularDataset]] = {
    "slice-rows": lambda ds: ds.slice[1:5],
    "slice-mask": lambda ds: ds.slice[np.array([True, False] * 3)],
    "slice-key": lambda ds: ds.slice[:, "y"],
    "slice-keys": lambda ds: ds.slice[[3, 0], ("y", "x")],
    "astuple": lambda ds: ds.astuple(),
    "asdict": lambda ds: ds.asdict(),
    "transform": lambda ds: ds.transform(
        ("sum", "x"), [((("x", "y"), "sum"), lambda x, y: x + y), ((("x",), "x"), lambda x: x)]
    ),
    "transform-callable": lambda ds: ds.transform("neg", lambda x, y: -x),
    "transform_batch": lambda ds: ds.transform_batch(
        ("x", "y"), [((("x", "y"), ("x", "y")), lambda x, y: {"x": y, "y": x})]
    ),
    "concat": lambda ds: ds.concat(other()),
    "join": lambda ds: ds.join(tabular.from_data({"z": list("abcdef")})),
}


def sources() -> dict[str, TabularDataset]:
    """A subclass overriding ``convert``, and a table given a converter."""
    return {
        "subclass": Points(),
        "with_converter": tabular.from_data(
            (("x", np.arange(6)), ("y", np.arange(6) * 10))
        ).with_converter(lambda *columns, **named: ("converted", plain(columns), plain(named))),
    }


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_each_view_converts_as_its_source(view: Callable[[TabularDataset], TabularDataset]) -> None:
    source = Points()
    made = view(source)
    data = made.fetch()
    converted = made.convert(data)
    assert isinstance(converted, Converted)
    assert converted.by is source
    assert converted.data is data


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_each_view_of_a_view_with_converter_keeps_the_converter(
    view: Callable[[TabularDataset], TabularDataset],
) -> None:
    source = other().with_converter(lambda *columns, **named: ("converted", columns, named))
    made = view(source)
    columns = (np.arange(2), np.arange(2))
    assert made.convert(columns) == ("converted", columns, {})


@pytest.mark.parametrize("combine", ["concat", "join"])
def test_concat_and_join_convert_as_their_first_dataset(combine: str) -> None:
    points = Points()
    plain_first = (
        other().concat(points) if combine == "concat" else other().join(points.slice[:, ()])
    )
    converted = plain_first.convert(([1, 2], [3, 4]))  # the default: each column as an array
    assert isinstance(converted, tuple)
    assert [column.tolist() for column in converted] == [[1, 2], [3, 4]]
    subclass_first = (
        points.concat(other()) if combine == "concat" else points.join(other().slice[:, ()])
    )
    assert subclass_first.convert("data") == Converted(points, "data")


def chain(source: TabularDataset) -> TabularDataset:
    """slice -> transform -> concat -> transform_batch -> join -> as-mode -> slice."""
    reversed_rows = source.slice[::-1, ("y", "x")]
    summed = reversed_rows.transform(
        ("x", "y"), [((("x", "y"), ("x", "y")), lambda x, y: (x, x + y))]
    )
    longer = summed.concat(other(3))
    doubled = longer.transform_batch(
        ("x", "y"), [((("x",), "x"), lambda x: np.asarray(x) * 2), ((("y",), "y"), lambda y: y)]
    )
    labelled = doubled.join(tabular.from_data({"label": list("abcdefghi")}))
    return labelled.asdict().slice[1:8]


@pytest.mark.parametrize("source", sources().values(), ids=sources().keys())
def test_a_chain_of_views_converts_as_its_source(source: TabularDataset) -> None:
    view = chain(source)
    assert view.mode is dict
    batch = view.slice[[0, 6]].fetch()
    assert plain(batch) == {"x": [8, 202], "y": [44, 1], "label": ["b", "h"]}
    assert view.convert(batch) == source.convert(batch)
    if isinstance(source, Points):
        assert view.convert(batch) == Converted(source, batch)


@pytest.mark.parametrize(
    "loader_class", [torch.utils.data.DataLoader, DataLoader], ids=["torch", "ppe"]
)
def test_a_dataloader_collates_a_chain_of_views_with_the_sources_convert(
    loader_class: type[torch.utils.data.DataLoader[Any]],
) -> None:
    source = Points()
    view = chain(source).astuple()
    loader = loader_class(view, batch_size=3, collate_fn=view.convert)
    batches = list(loader)
    assert [type(batch) for batch in batches] == [Converted] * 3
    assert all(batch.by is source for batch in batches)
    examples = [plain(batch.data) for batch in batches]
    assert examples == [
        [(8, 44, "b"), (6, 33, "c"), (4, 22, "d")],
        [(2, 11, "e"), (0, 0, "f"), (200, 0, "g")],
        [(202, 1, "h")],
    ]


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_a_dataloader_over_each_view_collates_with_the_sources_convert(
    view: Callable[[TabularDataset], TabularDataset],
) -> None:
    source = Points()
    made = view(source)
    batches = list(torch.utils.data.DataLoader(made, batch_size=4, collate_fn=made.convert))
    assert all(isinstance(batch, Converted) and batch.by is source for batch in batches)
    assert [plain(example) for batch in batches for example in batch.data] == plain(list(made))
