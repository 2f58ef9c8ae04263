"""Column-wise join of tables with the same length and distinct keys."""

from __future__ import annotations

from typing import Any

from pytorch_pfn_extras.dataset.tabular._indexing import KeyIndices, Rows
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import Mode, TabularDataset


class Join(TabularDataset):
    """The columns of each dataset side by side; converter of the first dataset."""

    def __init__(self, *datasets: TabularDataset) -> None:
        if not datasets:
            message = "join needs at least one dataset"
            raise ValueError(message)
        seen: dict[str, int] = {}
        for position, dataset in enumerate(datasets):
            if not isinstance(dataset, TabularDataset):
                message = (
                    f"join takes TabularDatasets, got {type(dataset).__name__} at position "
                    f"{position}"
                )
                raise TypeError(message)
            if len(dataset) != len(datasets[0]):
                message = (
                    f"cannot join datasets of different lengths: dataset 0 has "
                    f"{len(datasets[0])} rows but dataset {position} has {len(dataset)}"
                )
                raise ValueError(message)
            for key in dataset.keys:
                if key in seen:
                    message = (
                        f"cannot join datasets sharing key {key!r} (in dataset {seen[key]} and "
                        f"dataset {position}); keys must be unique"
                    )
                    raise ValueError(message)
                seen[key] = position
        self._datasets = datasets
        self._length = len(datasets[0])
        self._keys = tuple(seen)
        # key position -> (dataset position, key position inside that dataset)
        self._owners = [
            (d, k) for d, dataset in enumerate(datasets) for k in range(len(dataset.keys))
        ]

    def __len__(self) -> int:
        return self._length

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Mode:
        for dataset in self._datasets:
            mode = dataset.mode
            if mode is not None:
                return mode
        return tuple

    def convert(self, data: Any) -> Any:
        return self._datasets[0].convert(data)

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        wanted = range(len(self._keys)) if key_indices is None else key_indices
        # one call per dataset, with the tuple of the keys requested from it (never ``None``,
        # even for all of its keys: what PPE asks)
        requests: dict[int, list[int]] = {}
        for key_index in wanted:
            d, k = self._owners[key_index]
            requests.setdefault(d, []).append(k)
        fetched: dict[tuple[int, int], Any] = {}
        for d, local_keys in requests.items():
            columns = self._datasets[d]._get_rows(rows, tuple(local_keys))
            fetched.update(zip(((d, k) for k in local_keys), columns))
        return tuple(fetched[self._owners[key_index]] for key_index in wanted)
