"""Handlers: drive a logic and the models' runtimes on behalf of the trainer and evaluator."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.handler._logic_base import BaseLogic, Models
from pytorch_pfn_extras.runtime import BaseRuntime, get_runtime, named_runtime_modules, to

CompleteFn = Callable[[int, Any], None]
_MAX_CACHED = 64  # (models, callback) entries kept by a Handler
_RuntimeModules = list[tuple[torch.nn.Module, BaseRuntime]]


class BaseHandler:
    """Base class of handlers: the layer between the engines and a logic.

    The trainer and the evaluator call only the handler; this base class forwards each
    call to the logic, without runtimes or reporting (:class:`Handler` adds them). A step
    hands its outputs to ``complete_fn(batch_idx, outputs)``, which the engine uses to
    finish the iteration (post-step callbacks, metrics, extensions).

    Args:
        logic: The logic that defines the steps.
        options: Handler options (see :meth:`consume_options`).
    """

    def __init__(
        self, logic: BaseLogic, options: dict[str, Any] | None, *args: Any, **kwargs: Any
    ) -> None:
        if not isinstance(logic, BaseLogic):
            message = f"logic must be a ppe.handler.BaseLogic, got {type(logic).__name__}"
            raise TypeError(message)
        self._logic = logic
        self.consume_options(dict(options) if options else {})

    @property
    def logic(self) -> BaseLogic:
        """The logic this handler drives."""
        return self._logic

    def consume_options(self, options: dict[str, Any]) -> None:
        """Update the handler's options, popping the keys it uses from ``options``."""

    # ------------------------------------------------------------------ training

    def train_setup(self, trainer: Any, loader: Any) -> None:
        """Called once when a training run starts: from then on the logic reads where the run
        stands (its epoch length) in the trainer's ``run_state``, where the trainer has one."""
        self._logic.run_state = getattr(trainer, "run_state", None)

    def train_epoch_begin(self, trainer: Any, loader: Any) -> None:
        """Called when a training epoch starts."""
        self._logic.train_epoch_begin(trainer.models, trainer.epoch, loader)

    def train_epoch_end(self, trainer: Any) -> None:
        """Called when a training epoch completes."""
        self._logic.train_epoch_end(trainer.models, trainer.epoch)

    def train_validation_begin(self, trainer: Any, evaluator: Any) -> None:
        """Called before the trainer runs an evaluator."""
        self._logic.train_validation_begin(evaluator.models)

    def train_validation_end(self, trainer: Any, evaluator: Any) -> None:
        """Called after the trainer ran an evaluator."""
        self._logic.train_validation_end(trainer.models)

    def train_step(self, trainer: Any, batch_idx: int, batch: Any, complete_fn: CompleteFn) -> None:
        """Run one training step (the logic's step, then its optimizer step) and hand its
        outputs to ``complete_fn``."""
        outputs = self._logic.train_step(trainer.models, trainer.optimizers, batch_idx, batch)
        self._logic.train_step_optimizers(trainer.models, trainer.optimizers, batch_idx)
        complete_fn(batch_idx, outputs)

    def train_post_step(self, trainer: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
        """Called after each training step, with its outputs."""

    def train_cleanup(self, trainer: Any) -> None:
        """Called once when a training run completes."""

    # ------------------------------------------------------------------ evaluation

    def eval_setup(self, evaluator: Any, loader: Any) -> None:
        """Called once before the first evaluation."""

    def eval_loop_begin(self, evaluator: Any) -> None:
        """Called before the first step of each evaluation."""

    def eval_step(
        self, evaluator: Any, batch_idx: int, batch: Any, complete_fn: CompleteFn
    ) -> None:
        """Run one evaluation step and hand its outputs to ``complete_fn``."""
        outputs = self._logic.eval_step(evaluator.models, batch_idx, batch)
        complete_fn(batch_idx, outputs)

    def eval_post_step(self, evaluator: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
        """Called after each evaluation step."""

    def eval_loop_end(self, evaluator: Any) -> None:
        """Called after the last step of each evaluation."""


def _overriding(pairs: _RuntimeModules, callback: str) -> _RuntimeModules:
    """The pairs whose runtime overrides ``callback`` (the base's is a no-op): the per-step
    loops skip the others."""
    base = getattr(BaseRuntime, callback)
    return [(m, r) for m, r in pairs if getattr(type(r), callback, base) is not base]


def _report_keys(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        keys = list(value)
        if all(isinstance(key, str) for key in keys):
            return keys
    message = f"the {name!r} option must be a list of output names, got {value!r}"
    raise TypeError(message)


class Handler(BaseHandler):
    """The default handler: runs the models' runtime callbacks around the logic's steps.

    Every module tagged by ``ppe.to`` gets its runtime's callbacks (``initialize_module``,
    ``train_pre_step``/``train_post_step``, ``eval_pre_step``/``eval_post_step``...), the
    batch is moved by the entry runtime (the one of the engine's ``device``), and selected
    outputs are reported after each step. Each callback finds the tagged modules of the
    models it is given itself (once; the setup callbacks look again), so that a handler
    can be driven without its setup callbacks, as in PPE.

    A model that was never moved with ``ppe.to`` is moved to the entry runtime's device at
    setup (``train_setup``/``eval_setup``), with a warning.

    Args:
        logic: The logic that defines the steps.
        entry_runtime: The runtime that converts batches for the device.
        options: The options:

            * ``"train_report_keys"`` (list of str): outputs reported as ``train/<key>``
              after each training step. Default: none.
            * ``"eval_report_keys"`` (list of str): outputs reported as ``val/<key>`` after
              each evaluation step (the evaluator's metrics' results are among the
              outputs). Default: none.

    Raises:
        TypeError: ``entry_runtime`` is not a runtime, or an option has the wrong type.
    """

    def __init__(
        self, logic: BaseLogic, entry_runtime: BaseRuntime, options: dict[str, Any] | None
    ) -> None:
        if not isinstance(entry_runtime, BaseRuntime):
            message = f"entry_runtime must be a ppe.runtime.BaseRuntime, got {type(entry_runtime).__name__}"
            raise TypeError(message)
        self._entry_runtime = entry_runtime
        self._train_report_keys: list[str] = []
        self._eval_report_keys: list[str] = []
        # (id of a models mapping, callback) -> (the mapping, its modules whose runtime
        # overrides the callback): what each callback calls, found at its first call; and
        # by callback, the last mapping asked for (the per-step lookup).
        self._runtimes: dict[tuple[int, str], tuple[Models, _RuntimeModules]] = {}
        self._last: dict[str, tuple[Models, _RuntimeModules]] = {}
        super().__init__(logic, options)

    @property
    def entry_runtime(self) -> BaseRuntime:
        """The runtime that converts batches for the engine's device."""
        return self._entry_runtime

    def consume_options(self, options: dict[str, Any]) -> None:
        """Pop ``"train_report_keys"`` and ``"eval_report_keys"`` from ``options``."""
        super().consume_options(options)
        if "train_report_keys" in options:
            keys = options.pop("train_report_keys")
            self._train_report_keys = _report_keys(keys, "train_report_keys")
        if "eval_report_keys" in options:
            keys = options.pop("eval_report_keys")
            self._eval_report_keys = _report_keys(keys, "eval_report_keys")

    # ------------------------------------------------------------------ helpers

    def _modules(self, models: Models, callback: str) -> _RuntimeModules:
        """The tagged modules of ``models`` whose runtime overrides ``callback``, with their
        runtimes (found at the first call for these models, then reused: the per-step
        callbacks pay one dict lookup)."""
        last = self._last.get(callback)
        if last is not None and last[0] is models:
            return last[1]
        key = (id(models), callback)
        cached = self._runtimes.get(key)
        if cached is not None and cached[0] is models:
            self._last[callback] = cached
            return cached[1]
        pairs: _RuntimeModules = []
        for model in models.values():
            for _, module in named_runtime_modules(model):
                runtime = get_runtime(module)
                if runtime is not None:
                    pairs.append((module, runtime))
        pairs = _overriding(pairs, callback)
        if len(self._runtimes) >= _MAX_CACHED:  # a new mapping at every call: do not grow
            self._runtimes.clear()
        self._runtimes[key] = self._last[callback] = (models, pairs)
        return pairs

    def _setup_modules(self, models: Models, engine: str) -> list[tuple[str, torch.nn.Module]]:
        """Forget the modules found so far, move the models never moved with ``ppe.to`` to
        the entry runtime's device (with a warning), and return every tagged module with
        the name of its model."""
        self._runtimes.clear()
        self._last.clear()
        found: list[tuple[str, torch.nn.Module]] = []
        for name, model in models.items():
            modules = [module for _, module in named_runtime_modules(model)]
            if not modules:
                device = self._entry_runtime.device_spec
                message = (
                    f"the {engine}'s model {name!r} ({type(model).__name__}) was not moved with "
                    f"ppe.to(model, device); moving it to {str(device)!r}, the {engine}'s device "
                    "(call ppe.to before running it to choose yourself)"
                )
                warnings.warn(message, UserWarning, stacklevel=4)
                to(model, device, options=self._entry_runtime.options)
                modules = [model]
            found.extend((name, module) for module in modules)
        return found

    @staticmethod
    def _report(outputs: Any, keys: list[str], prefix: str) -> None:
        if not keys:
            return
        if not isinstance(outputs, Mapping):
            message = f"{prefix} report keys {keys} need dict outputs, got {type(outputs).__name__}"
            raise TypeError(message)
        missing = [key for key in keys if key not in outputs]
        if missing:
            message = f"{prefix} report keys {missing} are not in the outputs {list(outputs)}"
            raise KeyError(message)
        reporting.report({f"{prefix}/{key}": outputs[key] for key in keys})

    # ------------------------------------------------------------------ training

    def train_setup(self, trainer: Any, loader: Any) -> None:
        """Initialize the runtime of every tagged module of the trainer's models.

        Each runtime's ``initialize_module(module, loader, optimizer)`` gets the optimizer
        named like the module's model, or the only optimizer when there is one, else
        ``None``. A model never moved with ``ppe.to`` is moved to the trainer's device
        first, with a warning.
        """
        super().train_setup(trainer, loader)
        optimizers: Mapping[str, torch.optim.Optimizer] = trainer.optimizers
        only = next(iter(optimizers.values())) if len(optimizers) == 1 else None
        for name, module in self._setup_modules(trainer.models, "trainer"):
            runtime = get_runtime(module)
            if runtime is not None:
                runtime.initialize_module(module, loader, optimizers.get(name, only))

    def train_epoch_begin(self, trainer: Any, loader: Any) -> None:
        """Call ``train_epoch_begin`` on the logic and on every runtime."""
        super().train_epoch_begin(trainer, loader)
        for module, runtime in self._modules(trainer.models, "train_epoch_begin"):
            runtime.train_epoch_begin(module)

    def train_epoch_end(self, trainer: Any) -> None:
        """Call ``train_epoch_end`` on every runtime, then on the logic."""
        for module, runtime in self._modules(trainer.models, "train_epoch_end"):
            runtime.train_epoch_end(module)
        super().train_epoch_end(trainer)

    def train_validation_begin(self, trainer: Any, evaluator: Any) -> None:
        """Put the evaluator's models in evaluation mode (the logic) and tell their runtimes."""
        super().train_validation_begin(trainer, evaluator)
        for module, runtime in self._modules(evaluator.models, "train_validation_begin"):
            runtime.train_validation_begin(module)

    def train_validation_end(self, trainer: Any, evaluator: Any) -> None:
        """Tell the runtimes, and put the trainer's models back in training mode."""
        for module, runtime in self._modules(evaluator.models, "train_validation_end"):
            runtime.train_validation_end(module)
        super().train_validation_end(trainer, evaluator)

    def train_step(self, trainer: Any, batch_idx: int, batch: Any, complete_fn: CompleteFn) -> None:
        """Runtime pre-step callbacks, batch conversion, the logic's step and optimizer step,
        then ``complete_fn``."""
        models = trainer.models
        for module, runtime in self._modules(models, "train_pre_step"):
            runtime.train_pre_step(trainer, module, batch_idx, batch)
        batch = self._entry_runtime.convert_batch(batch)
        optimizers = trainer.optimizers
        outputs = self._logic.train_step(models, optimizers, batch_idx, batch)
        self._logic.train_step_optimizers(models, optimizers, batch_idx)
        complete_fn(batch_idx, outputs)

    def train_post_step(self, trainer: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
        """Runtime post-step callbacks and the ``train/<key>`` reports."""
        for module, runtime in self._modules(trainer.models, "train_post_step"):
            runtime.train_post_step(trainer, module, batch_idx, batch, outputs)
        self._report(outputs, self._train_report_keys, "train")

    def train_cleanup(self, trainer: Any) -> None:
        """Call ``train_cleanup`` on every runtime."""
        for module, runtime in self._modules(trainer.models, "train_cleanup"):
            runtime.train_cleanup(module)

    # ------------------------------------------------------------------ evaluation

    def eval_setup(self, evaluator: Any, loader: Any) -> None:
        """Initialize the runtime of every tagged module of the evaluator's models, as
        ``initialize_module(module, loader, None)``. A model never moved with ``ppe.to`` is
        moved to the evaluator's device first, with a warning."""
        for _, module in self._setup_modules(evaluator.models, "evaluator"):
            runtime = get_runtime(module)
            if runtime is not None:
                runtime.initialize_module(module, loader, None)

    def eval_step(
        self, evaluator: Any, batch_idx: int, batch: Any, complete_fn: CompleteFn
    ) -> None:
        """Runtime pre-step callbacks, batch conversion, the logic's step, then ``complete_fn``."""
        for module, runtime in self._modules(evaluator.models, "eval_pre_step"):
            runtime.eval_pre_step(evaluator, module, batch_idx, batch)
        batch = self._entry_runtime.convert_batch(batch)
        outputs = self._logic.eval_step(evaluator.models, batch_idx, batch)
        complete_fn(batch_idx, outputs)

    def eval_post_step(self, evaluator: Any, batch_idx: int, batch: Any, outputs: Any) -> None:
        """Runtime post-step callbacks and the ``val/<key>`` reports."""
        for module, runtime in self._modules(evaluator.models, "eval_post_step"):
            runtime.eval_post_step(evaluator, module, batch_idx, batch, outputs)
        self._report(outputs, self._eval_report_keys, "val")
