"""Reading one snapshot file (a DEFAULT or DISTRIBUTED snapshot, a rank's file of PPE 0.9's
SHARDED mode): ``torch.load(weights_only=True)`` through the writer's file system."""

from __future__ import annotations

import pickle
from typing import Any

import torch

from pytorch_pfn_extras.training._snapshots._storage import Storage


def is_disallowed_global(error: BaseException) -> bool:
    """Whether ``torch.load(weights_only=True)`` refused a valid file for its content."""
    return isinstance(error, pickle.UnpicklingError) and "Unsupported global" in str(error)


def load_file(storage: Storage, path: str) -> Any:
    """The content of the snapshot file ``path``, on the CPU.

    Raises:
        pickle.UnpicklingError: The file holds objects ``weights_only`` refuses (the
            message says how to allow them).
        Exception: Whatever reading a damaged or truncated file raises.
    """
    try:
        with storage.open(path, "rb") as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not is_disallowed_global(error):
            raise
        message = (
            f"the snapshot {path!r} holds objects that torch.load(weights_only=True) "
            "refuses (snapshots must contain only tensors, numbers, strings and "
            "lists/dicts of them; allow a class with "
            f"torch.serialization.add_safe_globals([...])): {error}"
        )
        raise pickle.UnpicklingError(message) from error
