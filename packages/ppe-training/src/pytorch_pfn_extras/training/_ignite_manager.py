"""IgniteExtensionsManager: extensions, triggers and snapshots around an Ignite engine."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.training._base_manager import (
    ModelsLike,
    OptimizersLike,
    _BaseExtensionsManager,
)
from pytorch_pfn_extras.training._extension import ExtensionLike

if TYPE_CHECKING:
    from ignite.engine import Engine

    from pytorch_pfn_extras.writing import Writer


def import_ignite(feature: str = "IgniteExtensionsManager") -> Any:
    """Import and return ``ignite.engine``; ``feature`` names what needs it in the error."""
    try:
        with warnings.catch_warnings():
            # Importing ignite imports torch.distributed.optim, whose TorchScript
            # decorators warn that TorchScript is deprecated: nothing the user can act on.
            warnings.filterwarnings(
                "ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning
            )
            import ignite.engine
    except ImportError as error:
        message = f'{feature} needs pytorch-ignite: pip install "ppe-training[ignite]"'
        raise ImportError(message) from error
    return ignite.engine


def _engine_stops_at(engine: Engine) -> int | None:
    """The iteration at which the engine ends its run by itself (``None``: unknown)."""
    state = engine.state
    ends: list[int] = []
    if state.max_epochs is not None and state.epoch_length is not None:
        ends.append(state.max_epochs * state.epoch_length)
    max_iters = getattr(state, "max_iters", None)
    if max_iters is not None:
        ends.append(max_iters)
    return min(ends) if ends else None


class IgniteExtensionsManager(_BaseExtensionsManager):
    """Manages the extensions and the state of an Ignite training loop.

    The manager attaches handlers to ``engine``: a fresh observation is opened (with the
    manager's reporter current) when each iteration starts, so the process function and
    your handlers can call :func:`pytorch_pfn_extras.reporting.report`; the extensions run
    when the iteration completes, *after* every handler you registered before
    ``engine.run`` (the manager adds its ``ITERATION_COMPLETED`` handler when the run
    starts). To run code between extensions, write an extension and reach the engine
    through ``manager.engine``.

    The number of iterations per epoch is the engine's ``epoch_length`` (``len(data)``, or
    the ``epoch_length`` given to ``engine.run``). The manager's iteration count is the
    authority: when the run starts, after the extensions start (an autoloading snapshot
    loads there), the engine's ``iteration`` and ``epoch`` are set from the manager's, so
    loading a state with :meth:`load_state_dict` before ``engine.run`` resumes where the
    snapshot was taken; resuming a finished run does no further iteration.

    Training ends (the extensions are finalized) when the manager's stop trigger fires
    after ``max_epochs`` epochs; the engine is terminated there if it would run longer. It
    also ends when the engine is terminated (``engine.terminate()``), or when a stop is
    requested (:meth:`request_stop`, e.g. by a
    :class:`~pytorch_pfn_extras.training.extensions.PreemptionHandler`): the engine is
    terminated after the running iteration and ``engine.run`` returns. If the engine stops
    earlier by its own ``max_epochs``, the extensions stay open so that a later
    ``engine.run`` continues; call :meth:`finalize` to end there.

    If an iteration raises, every extension's ``on_error`` is called once and the
    finalizers run; the exception then propagates out of ``engine.run`` (when you
    registered ``EXCEPTION_RAISED`` handlers of your own, they decide, as in Ignite).

    Args:
        engine: The Ignite trainer engine (``ignite.engine.Engine``).
        models: A module, or a mapping of names to modules (a single one is named
            ``'main'``).
        optimizers: An optimizer, or a mapping of names to optimizers.
        max_epochs: Number of epochs of training.
        extensions: Extensions to register (like calling :meth:`extend` on each).
        out_dir: Output directory of logs and snapshots.
        writer: Writer extensions use to write into ``out_dir``; a
            :class:`~pytorch_pfn_extras.writing.SimpleWriter` by default. Any callable
            ``writer(filename, out_dir, target, *, savefun=None, append=False)`` is
            accepted too (its ``initialize(out_dir)`` and ``finalize()`` are called if it
            has them); without an ``fs`` attribute it writes to the local file system.
        enable_profile: Record each extension with :func:`pytorch_pfn_extras.profiler.record`.
        enable_trace: Also add each extension's run to the trace (``record(trace=True)``).
        state_objects: Other objects saved in snapshots (``state_dict``/``load_state_dict``),
            by name.

    Raises:
        ImportError: pytorch-ignite is not installed.
        TypeError: ``engine`` is not an Ignite engine, ``models``/``optimizers`` have the
            wrong type, or ``writer`` is not callable.

    Example:
        >>> trainer = create_supervised_trainer(model, optimizer, loss_fn)
        >>> manager = ppe.training.IgniteExtensionsManager(
        ...     trainer, model, optimizer, 10, extensions=[extensions.LogReport()])
        >>> @trainer.on(Events.ITERATION_COMPLETED)
        ... def report_loss(engine):
        ...     ppe.reporting.report({"train/loss": engine.state.output})
        >>> trainer.run(loader, max_epochs=10)
    """

    def __init__(
        self,
        engine: Engine,
        models: ModelsLike,
        optimizers: OptimizersLike,
        max_epochs: float,
        *,
        extensions: Iterable[ExtensionLike] | None = None,
        out_dir: str | os.PathLike[str] = "result",
        writer: Writer | None = None,
        enable_profile: bool = False,
        enable_trace: bool = False,
        state_objects: Mapping[str, Any] | None = {},
    ) -> None:
        ignite_engine = import_ignite()
        if not isinstance(engine, ignite_engine.Engine):
            message = (
                "IgniteExtensionsManager needs an ignite.engine.Engine as engine, "
                f"got {type(engine).__name__}"
            )
            raise TypeError(message)
        super().__init__(
            models,
            optimizers,
            max_epochs,
            extensions,
            out_dir,
            writer,
            enable_profile=enable_profile,
            enable_trace=enable_trace,
            state_objects=state_objects,
            epoch_length=None,  # the engine's, when it runs
        )
        self.engine = engine
        """The Ignite engine whose iterations the manager follows."""
        self._events = ignite_engine.Events
        self._completion_attached = False
        self._running = False  # between the engine's STARTED and its end
        self.set_ignite_handlers()

    @property
    def stop_trigger(self) -> bool:
        """Whether training has finished (false until the engine's run starts the extensions).

        Unlike :class:`~pytorch_pfn_extras.training.ExtensionsManager`, reading it does not
        start the extensions: the epoch length is known only when the engine runs.
        """
        if not self._started:
            return self._failed
        return bool(_BaseExtensionsManager.stop_trigger.fget(self))  # type: ignore[attr-defined]

    def request_stop(self, reason: str, *, preempted: bool = False) -> None:
        """End training after the running iteration, as ``engine.terminate()`` does.

        The engine is terminated (its ``TERMINATE`` and ``COMPLETED`` events fire) after
        the running iteration, whose extensions run; the extensions are then finalized and
        ``engine.run`` returns. Before the engine runs, its next run ends when it starts.

        Args:
            reason: Why, for messages.
            preempted: The job is being stopped from outside (see
                :meth:`ExtensionsManager.request_stop
                <pytorch_pfn_extras.training.ExtensionsManager.request_stop>`).

        Raises:
            TypeError: ``reason`` is not a str, or ``preempted`` not a bool.
        """
        super().request_stop(reason, preempted=preempted)
        if self._running:
            self.engine.terminate()

    def set_ignite_handlers(self) -> None:
        """Attach the manager's handlers to the engine (done by the constructor)."""
        events, engine = self._events, self.engine
        engine.add_event_handler(events.STARTED, self._on_started)
        engine.add_event_handler(events.ITERATION_STARTED, self._on_iteration_started)
        engine.add_event_handler(events.COMPLETED, self._on_completed)
        engine.add_event_handler(events.TERMINATE, self._on_terminate)
        engine.add_event_handler(events.EXCEPTION_RAISED, self._on_exception)

    # ------------------------------------------------------------------ handlers

    def _on_started(self, engine: Engine) -> None:
        if self._failed or self._finalized:
            message = (
                "this IgniteExtensionsManager has finished (its extensions were finalized); "
                "create a new manager, and load its state_dict() to go on training"
            )
            raise RuntimeError(message)
        epoch_length = engine.state.epoch_length
        if epoch_length is None:
            message = (
                "IgniteExtensionsManager needs the epoch length when the run starts, but the "
                "data has no len(); pass epoch_length= to engine.run()"
            )
            raise ValueError(message)
        run = self._run
        run.begin(int(epoch_length))
        if not self._completion_attached:
            # Added now, so that it runs after the handlers the user registered before
            # engine.run().
            engine.add_event_handler(self._events.ITERATION_COMPLETED, self._on_iteration_completed)
            self._completion_attached = True
        self.start_extensions()
        self._running = True
        state = engine.state
        if state.iteration != run.iteration:
            state.iteration = run.iteration
            state.epoch = run.epoch
        if self._stops():
            engine.terminate()

    def _on_iteration_started(self, engine: Engine) -> None:
        if self._failed or self._finalized:
            # Ignite goes on after an exception that a user handler swallowed; the
            # extensions are finalized by then, so training stops here.
            engine.terminate()
            return
        self._begin_iteration()

    def _on_iteration_completed(self, engine: Engine) -> None:
        if not self._in_iteration:
            return
        self._run.iteration = engine.state.iteration
        self._end_iteration()
        if self._finalized:
            stops_at = _engine_stops_at(engine)
            if stops_at is None or self.iteration < stops_at:
                engine.terminate()

    def _on_terminate(self, engine: Engine) -> None:
        self._running = False
        if not self._finalized and not self._failed:
            self.finalize()

    def _on_completed(self, engine: Engine) -> None:
        self._running = False
        if self._finalized or self._failed:
            return
        if self._stops():
            self.finalize()

    def _on_exception(self, engine: Engine, exc: BaseException) -> None:
        self._running = False
        self._fail_iteration(exc, exc.__traceback__)
        handlers = getattr(engine, "_event_handlers", {}).get(self._events.EXCEPTION_RAISED, ())
        if len(handlers) <= 1:
            # Only ours: keep Ignite's behaviour without handlers, which is to raise.
            raise exc
