"""Column primitive: row selection for arrays, tensors and lists.

NumPy arrays and tensors are indexed in one vectorised call; only plain Python sequences are
walked element by element.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pytorch_pfn_extras.dataset.tabular._indexing import Rows, range_to_slice


def take(column: Any, rows: Rows) -> Any:
    """Rows ``rows`` of one column (a view where the container allows it)."""
    if rows is None:
        return column
    if isinstance(rows, int):
        if isinstance(column, (np.ndarray, torch.Tensor)):
            return column[rows : rows + 1]
        return [column[rows]]
    if isinstance(column, np.ndarray):
        if isinstance(rows, range):
            return column[range_to_slice(rows)]
        return column[rows]
    if isinstance(column, torch.Tensor):
        if isinstance(rows, range):
            if rows.step > 0:
                return column[range_to_slice(rows)]
            rows = np.arange(rows.start, rows.stop, rows.step, dtype=np.intp)
        # torch.from_numpy rejects negative strides and warns about read-only arrays
        if not (rows.flags.writeable and rows.flags.c_contiguous and rows.strides[0] > 0):
            rows = np.array(rows, dtype=np.int64)
        index = torch.from_numpy(rows).to(device=column.device, dtype=torch.int64)
        return column[index]
    if isinstance(rows, range):
        return list(column[range_to_slice(rows)])
    return [column[i] for i in rows.tolist()]
