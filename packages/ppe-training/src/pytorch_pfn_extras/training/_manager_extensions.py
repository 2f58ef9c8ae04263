"""The manager's extension registry: registering, ordering, starting and running extensions."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._extension import PRIORITY_SNAPSHOT, ExtensionEntry, ExtensionLike
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger
from pytorch_pfn_extras.training._writer_util import initialize_writer

if TYPE_CHECKING:
    import types

    from pytorch_pfn_extras.training._engine._run_state import RunState
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol
    from pytorch_pfn_extras.writing import Writer

    # The registry hands the manager it is mixed into (self) to extensions and triggers:
    # to the type checker it is that manager. At run time it derives from object.
    _Manager = ExtensionsManagerProtocol
else:
    _Manager = object

_RESERVED_NAMES = frozenset({"training"})

# (trigger, extension) pairs of the hot loop; the extension is wrapped in a _Recorded
# when profiling, so that one loop serves both.
_Runner = tuple[Trigger, ExtensionLike]


class _Recorded:
    """An extension run inside ``profiler.record(tag)`` (``enable_profile``/``enable_trace``)."""

    __slots__ = ("_enable", "_extension", "_record", "_tag", "_trace")

    def __init__(self, extension: ExtensionLike, tag: str, enable: bool, trace: bool) -> None:
        # Imported only by a profiled manager: the profiler is not needed otherwise.
        from pytorch_pfn_extras.profiler import record

        self._record = record
        self._extension = extension
        self._tag = tag
        self._enable = enable
        self._trace = trace

    def __call__(self, manager: Any) -> Any:
        with self._record(self._tag, enable=self._enable, trace=self._trace):
            return self._extension(manager)


class _ExtensionRegistry(_Manager):
    """The extensions of :class:`_BaseExtensionsManager` (a mixin of it).

    The manager's ``__init__`` sets every attribute declared below; the methods declared
    under ``TYPE_CHECKING`` are the manager's.
    """

    _extensions: dict[str, ExtensionEntry]
    _entries: list[ExtensionEntry]
    _runners_before_stop: list[_Runner]
    _runners_after_stop: list[_Runner]
    _started: bool
    _failed: bool
    _in_extensions: bool
    _enable_profile: bool
    _enable_trace: bool
    _start_time: float | None
    _stop_iteration: int
    _run: RunState
    _writer: Writer
    _out: str

    if TYPE_CHECKING:

        def _begin_iteration(self) -> None: ...

        def _close_scope(self) -> None: ...

        def _fail_iteration(self, exc: BaseException, tb: types.TracebackType | None) -> None: ...

        def _finalize(self, raise_errors: bool) -> None: ...

        def _evaluate_stop_trigger(self) -> bool: ...

    def extend(
        self,
        extension: ExtensionLike | ExtensionEntry,
        name: str | None = None,
        trigger: TriggerLike = None,
        priority: int | None = None,
        *,
        call_before_training: bool = False,
    ) -> None:
        """Register an extension.

        Args:
            extension: An :class:`~pytorch_pfn_extras.training.Extension`, a function
                decorated with :func:`~pytorch_pfn_extras.training.make_extension`, any
                callable taking the manager, or an
                :class:`~pytorch_pfn_extras.training.ExtensionEntry` (the other arguments,
                when given, replace its options).
            name: Its name; ``extension.name``, ``default_name`` or ``__name__`` by default.
                A name already taken gets a suffix: ``"<name>_1"``, ``"<name>_2"``...
            trigger: When to run it; ``extension.trigger`` (else every iteration) by default.
            priority: Higher runs first within an iteration; ``extension.priority`` by default.
            call_before_training: Also run it once before the first iteration of a fresh run.

        Raises:
            RuntimeError: The extensions have already started.
            ValueError: The name is empty or reserved (``'training'``).

        Example:
            >>> manager.extend(extensions.LogReport(), trigger=(1, "epoch"))
        """
        if self._started:
            message = (
                f"cannot extend with {extension!r} after the extensions started (the first "
                "iteration, or manager.stop_trigger, starts them); register extensions before"
            )
            raise RuntimeError(message)
        if isinstance(extension, ExtensionEntry):  # PPE accepts a ready entry
            entry = extension
            extension = entry.extension
            if name is not None:
                entry.name = name
            if priority is not None:
                entry.priority = priority
            if trigger is not None:
                entry.trigger = get_trigger(trigger)
            entry.call_before_training = entry.call_before_training or call_before_training
        else:
            entry = ExtensionEntry(
                extension,
                name=name,
                priority=priority,
                trigger=trigger,
                call_before_training=call_before_training,
            )
        if entry.name in _RESERVED_NAMES:
            message = f"the extension name {entry.name!r} is reserved; pass another name="
            raise ValueError(message)
        base = unique = entry.name
        ordinal = 0
        while unique in self._extensions:
            ordinal += 1
            unique = f"{base}_{ordinal}"
        entry.name = unique
        try:
            extension.name = unique  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # builtins, slotted objects: keep the entry name
            pass
        self._extensions[unique] = entry

    def get_extension(self, name: str) -> Any:
        """Return the extension registered under ``name``.

        Raises:
            ValueError: No extension has that name (the message lists the names).
        """
        entry = self._extensions.get(name)
        if entry is None:
            message = f"no extension named {name!r}; registered: {sorted(self._extensions)}"
            raise ValueError(message)
        return entry.extension

    @property
    def extensions(self) -> list[tuple[str, ExtensionEntry]]:
        """``(name, entry)`` pairs in execution order (priority, then registration)."""
        entries = self._entries if self._started else self._sorted_entries()
        return [(entry.name, entry) for entry in entries]

    def _sorted_entries(self) -> list[ExtensionEntry]:
        return sorted(self._extensions.values(), key=lambda e: -e.priority)

    def _runner(self, entry: ExtensionEntry) -> _Runner:
        extension = entry.extension
        if self._enable_profile or self._enable_trace:
            tag = "extension:" + entry.name
            extension = _Recorded(extension, tag, self._enable_profile, self._enable_trace)
        return (entry.trigger, extension)

    def start_extensions(self) -> None:
        """Start training: load an autoloaded snapshot, initialize extensions, start the clock.

        Called by the first iteration (or the first read of :attr:`stop_trigger`); calling
        it again does nothing. Extensions registered with ``call_before_training=True`` run
        here when training starts from iteration 0.
        """
        if self._started:
            return
        entries = self._sorted_entries()
        self._entries = entries
        self._runners_before_stop = [
            self._runner(e) for e in entries if e.priority > PRIORITY_SNAPSHOT
        ]
        self._runners_after_stop = [
            self._runner(e) for e in entries if e.priority <= PRIORITY_SNAPSHOT
        ]
        self._started = True
        self._start_time = time.perf_counter()
        initialize_writer(self._writer, self._out)
        # Snapshots that autoload go first, so that every other extension (and its
        # trigger, e.g. a finished OnceTrigger) is initialized from the loaded state.
        loaders = [e for e in entries if e.loads_state]
        try:
            for entry in loaders + [e for e in entries if e not in loaders]:
                initialize = getattr(entry.extension, "initialize", None)
                if initialize is None or getattr(entry.trigger, "finished", False):
                    continue
                initialize(self)
        except BaseException:
            # Nothing ran yet, so no on_error (a snapshot_on_error must not save this state).
            self._failed = True
            self._finalize(raise_errors=False)
            raise
        self._start_time = time.perf_counter()
        if self.iteration == 0:
            before = [e for e in entries if e.call_before_training]
            if before:
                self._begin_iteration()
                try:
                    for entry in before:
                        entry.extension(self)
                except BaseException as exc:
                    self._fail_iteration(exc, exc.__traceback__)
                    raise
                self._close_scope()

    def run_extensions(self) -> None:
        """Run the extensions whose trigger fires at the current iteration, in order.

        The stop trigger is evaluated between the extensions of priority above
        :data:`~pytorch_pfn_extras.training.extension.PRIORITY_SNAPSHOT` and the others,
        so a snapshot records its state.
        """
        self._in_extensions = True
        for trigger, extension in self._runners_before_stop:
            if trigger(self):
                extension(self)
        if self._stop_iteration != self._run.iteration:
            self._evaluate_stop_trigger()
        for trigger, extension in self._runners_after_stop:
            if trigger(self):
                extension(self)
        self._in_extensions = False
