"""Running a comparer's engines: a group at once in lock-step, and comparing recordings.

Every engine of a group runs :func:`_run` (in a thread of its own when the group has
several) with a recorder whose sink is the group's :class:`_LockStep`; the last engine to
arrive at a step compares every engine's values with the baseline's (live, or kept in a
:class:`_Recording` from an earlier group or a dump).
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from pytorch_pfn_extras.training import Evaluator, Trainer
from pytorch_pfn_extras.utils._comparer_record import _Recorder, _Recording
from pytorch_pfn_extras.utils._comparer_sync import Arrivals, _LockStep
from pytorch_pfn_extras.utils._comparer_values import (
    CompareFn,
    Engine,
    Values,
    _check_values,
    _Selection,
)

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._trigger_util import Trigger


class _Member(NamedTuple):
    """An engine added to a comparer, with the arguments of its ``run``."""

    engine: Engine
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _check_engine(engine: Any) -> Engine:
    if not isinstance(engine, (Trainer, Evaluator)):
        message = (
            "a comparer runs engines made by ppe.engine.create_trainer or create_evaluator, "
            f"got {type(engine).__name__}"
        )
        raise TypeError(message)
    return engine


def _run_group(
    group: list[tuple[str, _Member]],
    reference: _Recording,
    keep: bool,
    selection: _Selection,
    trigger: Trigger,
    compare_fn: CompareFn,
) -> None:
    """Run the engines of ``group`` at once and compare them with ``reference`` at each step.

    Args:
        group: The engines, by name, with the arguments of their ``run``.
        reference: The baseline's recording; when the baseline is in ``group`` its values
            are compared live, and added to ``reference`` if ``keep``.
        keep: Keep the live baseline's values, for later groups and dumps.
        selection: The outputs and parameters to record.
        trigger: When to record (copied for each engine).
        compare_fn: See :func:`get_default_comparer`.
    """
    live = any(name == reference.name for name, _ in group)

    def settle(arrived: Arrivals) -> None:
        steps = {step for step, _ in arrived.values()}
        if len(steps) > 1:
            at = ", ".join(f"{n!r} at {step}" for n, (step, _) in arrived.items())
            message = f"the engines recorded different iterations: {at}"
            raise AssertionError(message)
        step = steps.pop()
        if live:
            expected = arrived[reference.name][1]
            if keep:
                reference.add(step, expected)
        else:
            found = reference.get(step)
            if found is None:
                message = (
                    f"the baseline {reference.name!r} recorded nothing at iteration {step}, "
                    f"which {list(arrived)} recorded"
                )
                raise AssertionError(message)
            expected = found
        for name, (_, values) in arrived.items():
            if name != reference.name:
                _check_values(compare_fn, reference.name, name, step, expected, values)

    lock_step = _LockStep([name for name, _ in group], settle)
    runs = [
        (
            member,
            _Recorder(
                name,
                member.engine,
                selection,
                copy.deepcopy(trigger),
                lock_step.arrive,
            ),
        )
        for name, member in group
    ]
    if len(runs) == 1:
        _run(*runs[0], lock_step)
    else:
        threads = [
            threading.Thread(
                target=_run, args=(*run, lock_step), name=f"comparer-{run[1].name}", daemon=True
            )
            for run in runs
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except BaseException as error:  # KeyboardInterrupt: stop the engines, too
            lock_step.abort(error)
            raise
    if lock_step.failure is not None:
        raise lock_step.failure
    if live:
        reference.total = lock_step.totals[reference.name]
    for name, total in lock_step.totals.items():
        if total != reference.total:
            message = (
                f"{name!r} ran {total} iterations but the baseline {reference.name!r} "
                f"ran {reference.total}"
            )
            raise AssertionError(message)


def _compare_recordings(reference: _Recording, other: _Recording, compare_fn: CompareFn) -> None:
    if reference.steps != other.steps or reference.total != other.total:
        message = (
            f"{other.name!r} recorded {len(other.steps)} of {other.total} iterations, "
            f"the baseline {reference.name!r} {len(reference.steps)} of {reference.total}"
        )
        raise AssertionError(message)
    for step in reference.steps:
        _check_values(
            compare_fn,
            reference.name,
            other.name,
            step,
            cast("Values", reference.get(step)),
            cast("Values", other.get(step)),
        )


def _run(member: _Member, recorder: _Recorder, lock_step: _LockStep) -> None:
    """Run one engine of a group (in its own thread when the group has several)."""
    error: BaseException | None = None
    try:
        with recorder.installed():
            member.engine.run(*member.args, **member.kwargs)
    except BaseException as caught:  # handed to the group, re-raised by compare()
        error = caught
    finally:
        lock_step.leave(recorder.name, recorder.steps, error)
