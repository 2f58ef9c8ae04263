"""Lazy per-example (``transform``) and per-batch (``transform_batch``) transforms.

A transformed table is a list of steps, each a function from some columns of the parent
(``input_keys``) to some of the new columns (``output_keys``): PPE's ``((input_keys,
output_keys), fn)`` pairs. A read runs only the steps producing the requested keys and reads
from the parent only their inputs, in one call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

from pytorch_pfn_extras.dataset.tabular._indexing import KeyIndices, Rows, count_rows
from pytorch_pfn_extras.dataset.tabular._tabular_dataset import (
    Mode,
    TabularDataset,
    TransformSpec,
    _short,
)

Kind: TypeAlias = Literal["tuple", "dict", "value"]
_ARTICLE = {"tuple": "a tuple", "dict": "a dict", "value": "a single value"}


@dataclass
class _Step:
    """One ``((input_keys, output_keys), function)`` pair of a transform."""

    label: str  # names the step in error messages
    inputs: tuple[int, ...]  # positions of the input keys among the parent's keys
    outputs: tuple[str, ...]
    function: Callable[..., Any]
    bare: bool  # output keys given as one str: the function returns the value itself
    kind: Kind | None = None  # what the function returns; known after its first call

    def __post_init__(self) -> None:
        if self.bare:
            self.kind = "value"

    def classify(self, output: Any) -> Kind:
        """What ``output`` is (checking it holds exactly this step's outputs)."""
        if self.bare:
            return "value"
        outputs = self.outputs
        if isinstance(output, tuple):
            if len(output) != len(outputs):
                message = (
                    f"{self.label} must return {len(outputs)} values for keys {outputs!r}, got a "
                    f"tuple of {len(output)}: {_short(output)}"
                )
                raise ValueError(message)
            return "tuple"
        if isinstance(output, dict):
            if output.keys() != set(outputs):
                message = (
                    f"{self.label} must return a dict with keys {outputs!r}, got keys "
                    f"{tuple(output)!r}"
                )
                raise ValueError(message)
            return "dict"
        if len(outputs) == 1:
            return "value"
        message = (
            f"{self.label} must return a tuple or a dict for keys {outputs!r}, got "
            f"{type(output).__name__} {_short(output)}"
        )
        raise TypeError(message)

    def split(self, output: Any, kind: Kind) -> list[Any]:
        """The values (or columns) of ``output``, in the order of :attr:`outputs`."""
        if kind == "value":
            return [output]
        if kind == "dict":
            return [output[key] for key in self.outputs]
        return list(output)


class _Plan(NamedTuple):
    """What a read of some keys runs: the steps, their inputs and the parent request."""

    steps: list[_Step]
    # per step: positions of its inputs among the fetched columns (None: all, in order)
    arguments: list[tuple[int, ...] | None]
    fetch: bool  # whether any input is needed
    request: KeyIndices  # what the parent is asked (None: all of its keys)
    # per requested key: (step in ``steps``, output of that step); None: the one step's outputs
    picks: list[tuple[int, int]] | None


_MAX_PLANS = 64  # distinct key requests remembered per table (a plan is cheap to rebuild)


class Transform(TabularDataset):
    """``dataset.transform(keys, transforms)`` (``batch=False``) and ``transform_batch``.

    The mode follows what the functions return: ``tuple`` for tuples, ``dict`` for dicts, and,
    when each returns a single value, ``None`` for one key and ``tuple`` for several (``keys``
    given as one str always makes a unary table). It is known once each function has run;
    asking for it earlier transforms one example. :meth:`convert` is the source's, as in PPE.
    """

    def __init__(
        self,
        dataset: TabularDataset,
        keys: str | tuple[str, ...],
        transforms: TransformSpec,
        *,
        batch: bool,
    ) -> None:
        name = "transform_batch" if batch else "transform"
        if isinstance(keys, str):
            self._unary = True
            keys = (keys,)
        elif isinstance(keys, tuple) and all(isinstance(key, str) for key in keys):
            self._unary = False
            if len(set(keys)) != len(keys):
                message = f"{name} keys must be unique, got {keys!r}"
                raise ValueError(message)
        else:
            message = f"{name} keys must be a str or a tuple of str, got {keys!r}"
            raise TypeError(message)
        if callable(transforms):
            # our shorthand: one function of every column, producing every key
            whole = _Step(name, tuple(range(len(dataset.keys))), keys, transforms, self._unary)
            steps = [whole]
        else:
            steps = _parse_steps(transforms, dataset.keys, name)
        self._dataset = dataset
        self._keys: tuple[str, ...] = keys
        self._steps = steps
        self._batch = batch
        self._name = name
        self._owners = _owners(steps, keys, name)  # key position -> position of its step
        self._plans: dict[KeyIndices, _Plan] = {}
        self._mode_settled = False  # once True, the mode is ``_mode``
        self._mode: Mode = tuple

    def __len__(self) -> int:
        return len(self._dataset)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def mode(self) -> Mode:
        if self._unary:
            return None
        if self._mode_settled:
            return self._mode
        known, mode = self._known_mode()
        if not known and len(self._dataset) > 0:
            self._get_rows(0, None)
            known, mode = self._known_mode()
        if known:  # final: a function that later returns another type raises
            self._mode_settled, self._mode = True, mode
        return mode if known else tuple

    def _known_mode(self) -> tuple[bool, Mode]:
        kinds = {step.kind for step in self._steps}
        if "tuple" in kinds:
            return True, tuple
        if "dict" in kinds:
            return True, dict
        if None in kinds:
            return False, None
        return True, None if len(self._keys) == 1 else tuple

    def convert(self, data: Any) -> Any:
        """The source's :meth:`convert`, as for every view."""
        return self._dataset.convert(data)

    def get_examples(self, indices: Any, key_indices: tuple[int, ...] | None) -> tuple[Any, ...]:
        return self._get_rows(*self._check_request(indices, key_indices))

    def _get_rows(self, rows: Rows, key_indices: KeyIndices) -> tuple[Any, ...]:
        plan = self._plans.get(key_indices) or self._plan(key_indices)
        parent = self._dataset
        columns = parent._get_rows(rows, plan.request) if plan.fetch else ()
        n_rows = count_rows(rows, len(parent))
        names = parent.keys if parent.mode is dict else None
        run = self._run_batch if self._batch else self._run_rows
        results = []
        for step, positions in zip(plan.steps, plan.arguments):
            arguments = columns if positions is None else [columns[p] for p in positions]
            keywords = None if names is None else [names[i] for i in step.inputs]
            results.append(run(step, arguments, keywords, n_rows))
        if plan.picks is None:  # one step, all of its outputs in order (the shorthand's reads)
            return tuple(results[0])
        return tuple(results[s][j] for s, j in plan.picks)

    def _plan(self, key_indices: KeyIndices) -> _Plan:
        """Which steps a request for ``key_indices`` runs, and what it asks the parent."""
        wanted = range(len(self._keys)) if key_indices is None else key_indices
        needed = sorted({self._owners[k] for k in wanted})
        steps = [self._steps[s] for s in needed]
        inputs = sorted({i for step in steps for i in step.inputs})
        where = {parent_key: column for column, parent_key in enumerate(inputs)}
        arguments = [tuple(where[i] for i in step.inputs) for step in steps]
        plan = _Plan(
            steps=steps,
            arguments=[None if a == tuple(range(len(inputs))) else a for a in arguments],
            fetch=bool(inputs),
            request=None if len(inputs) == len(self._dataset.keys) else tuple(inputs),
            picks=[
                (
                    needed.index(self._owners[k]),
                    self._steps[self._owners[k]].outputs.index(self._keys[k]),
                )
                for k in wanted
            ],
        )
        if len(steps) == 1 and plan.picks == [(0, j) for j in range(len(steps[0].outputs))]:
            plan = plan._replace(picks=None)
        if len(self._plans) < _MAX_PLANS:
            self._plans[key_indices] = plan
        return plan

    # ------------------------------------------------------------------ running one step

    def _run_rows(
        self, step: _Step, columns: Sequence[Any], keywords: list[str] | None, n_rows: int
    ) -> list[Any]:
        function = step.function
        rows: Any = zip(*columns) if columns else itertools.repeat((), n_rows)
        if keywords is None:
            outputs = [function(*row) for row in rows]
        else:
            outputs = [function(**dict(zip(keywords, row))) for row in rows]
        if step.bare:
            return [outputs]
        if not outputs:
            return [[] for _ in step.outputs]
        kind: Kind = "value"
        for output in outputs:
            kind = step.classify(output)
            if kind != step.kind:
                self._record(step, kind, output)
        if kind == "value":
            return [outputs]
        if kind == "dict":
            return [[output[key] for output in outputs] for key in step.outputs]
        return [[output[j] for output in outputs] for j in range(len(step.outputs))]

    def _run_batch(
        self, step: _Step, columns: Sequence[Any], keywords: list[str] | None, n_rows: int
    ) -> list[Any]:
        if keywords is None:
            output = step.function(*columns)
        else:
            output = step.function(**dict(zip(keywords, columns)))
        kind = step.classify(output)
        if kind != step.kind:
            self._record(step, kind, output)
        values = step.split(output, kind)
        for key, column in zip(step.outputs, values):
            try:
                length = len(column)
            except TypeError:
                message = (
                    f"{step.label} must return columns with one entry per row, got "
                    f"{type(column).__name__} {_short(column)} for key {key!r}"
                )
                raise TypeError(message) from None
            if length != n_rows:
                message = (
                    f"{step.label} must not change the number of rows: key {key!r} has {length} "
                    f"rows, expected {n_rows}"
                )
                raise ValueError(message)
        return values

    def _record(self, step: _Step, kind: Kind, output: Any) -> None:
        previous = step.kind
        if previous is not None:
            message = (
                f"{step.label} must always return the same type: it returned "
                f"{_ARTICLE[previous]} before but now {type(output).__name__} {_short(output)}"
            )
            raise ValueError(message)
        clash = {"tuple": "dict", "dict": "tuple"}.get(kind)
        for other in self._steps:
            if clash is not None and other.kind == clash:
                message = (
                    f"{self._name} functions must all return tuples or all return dicts: "
                    f"{other.label} returned a {clash} but {step.label} returned "
                    f"{type(output).__name__} {_short(output)}"
                )
                raise ValueError(message)
        step.kind = kind


def _parse_steps(transforms: Any, parent_keys: tuple[str, ...], name: str) -> list[_Step]:
    expected = "a list of ((input_keys, output_keys), function) pairs, or a callable"
    if not isinstance(transforms, (list, tuple)):
        message = f"{name} takes {expected}, got {type(transforms).__name__} {_short(transforms)}"
        raise TypeError(message)
    steps: list[_Step] = []
    for position, item in enumerate(transforms):
        label = f"{name} function {position}"
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and isinstance(item[0], (tuple, list))
            and len(item[0]) == 2
            and callable(item[1])
        ):
            message = f"{name} takes {expected}; item {position} is not such a pair: {_short(item)}"
            raise TypeError(message)
        (input_keys, output_keys), function = item
        inputs, _ = _key_names(input_keys, f"input keys of {label}")
        outputs, bare = _key_names(output_keys, f"output keys of {label}")
        if not outputs:
            message = f"output keys of {label} must not be empty"
            raise ValueError(message)
        positions = []
        for key in inputs:
            if key not in parent_keys:
                message = (
                    f"input key {key!r} of {label} is not a key of the dataset; it has keys "
                    f"{parent_keys!r}"
                )
                raise ValueError(message)
            positions.append(parent_keys.index(key))
        steps.append(_Step(label, tuple(positions), outputs, function, bare))
    return steps


def _key_names(spec: Any, what: str) -> tuple[tuple[str, ...], bool]:
    """Keys given as one str (flag ``True``) or a tuple/list of str."""
    if isinstance(spec, str):
        return (spec,), True
    if isinstance(spec, (tuple, list)) and all(isinstance(key, str) for key in spec):
        return tuple(spec), False
    message = f"{what} must be a str or a tuple of str, got {_short(spec)}"
    raise TypeError(message)


def _owners(steps: Sequence[_Step], keys: tuple[str, ...], name: str) -> list[int]:
    producer: dict[str, int] = {}
    for s, step in enumerate(steps):
        for key in step.outputs:
            if key in producer:
                first = steps[producer[key]].label
                message = (
                    f"{name} outputs must be disjoint: key {key!r} is produced by {first} and "
                    f"by {step.label}"
                )
                raise ValueError(message)
            producer[key] = s
    missing = [key for key in keys if key not in producer]
    extra = [key for key in producer if key not in keys]
    if missing or extra:
        message = (
            f"{name} outputs must be exactly the keys {keys!r}: no function produces "
            f"{tuple(missing)!r}; not among the keys: {tuple(extra)!r}"
        )
        raise ValueError(message)
    return [producer[key] for key in keys]
