"""Regression: concat after an empty transformed table takes the next table's mode."""

from __future__ import annotations

import numpy as np

from pytorch_pfn_extras.dataset.tabular import from_data


def test_concat_takes_the_mode_of_the_first_non_empty_table() -> None:
    source = from_data({"x": np.arange(4)})
    empty = source.slice[0:0].transform(("x",), lambda x: {"x": x * 10})
    table = empty.concat(from_data({"x": np.arange(2)}))
    assert table.mode is dict
    assert table.get_example(1) == {"x": 1}
    fetched = table.fetch()
    assert isinstance(fetched, dict)
    np.testing.assert_array_equal(fetched["x"], [0, 1])
