"""A dataset wrapper that traces every ``__getitem__``, in DataLoader workers too."""

from __future__ import annotations

from typing import Any, TypeVar

import torch.utils.data

from pytorch_pfn_extras.profiler._trace_state import get_tracer
from pytorch_pfn_extras.profiler._tracer import Tracer

_T_co = TypeVar("_T_co", covariant=True)


class TraceableDataset(torch.utils.data.Dataset[_T_co]):
    """Wrap a map-style dataset so that each ``__getitem__`` becomes a tracer event.

    The events are named ``tag``; a :class:`ChromeTracer`'s carry the index in ``args``. The
    tracer travels with the dataset to DataLoader worker processes (forked or spawned), and
    their events come back to the main process's tracer. The tracer's :meth:`~Tracer.enable`
    switch applies, not :func:`enable_global_trace` / :func:`enable_thread_trace`, which are
    :func:`record`'s.

    Args:
        dataset: The map-style dataset to wrap.
        tag: Name of the events.
        tracer: Tracer to record to; ``None``: the global tracer (:func:`get_tracer`).

    Example:
        >>> tracer = get_tracer()
        >>> loader = DataLoader(TraceableDataset(dataset, "getitem"), num_workers=2)
        >>> for batch in loader:
        ...     ...
        >>> tracer.flush("trace.json", writer)
    """

    def __init__(
        self, dataset: torch.utils.data.Dataset[_T_co], tag: str, tracer: Tracer | None = None
    ) -> None:
        self._dataset = dataset
        self._tag = tag
        self._tracer = tracer if tracer is not None else get_tracer()

    def __getitem__(self, index: Any) -> _T_co:
        with self._tracer.add_event(self._tag) as event:
            if isinstance(event, dict):  # a Chrome event
                event["args"] = {"index": index if type(index) is int else repr(index)}
            return self._dataset[index]

    def __len__(self) -> int:
        return len(self._dataset)  # type: ignore[arg-type]
