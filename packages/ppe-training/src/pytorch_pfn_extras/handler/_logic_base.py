"""The base classes of logics, and ``torch_autocast``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from pytorch_pfn_extras.training._engine._run_state import RunState
from pytorch_pfn_extras.training._manager_util import check_optimizer

# Optimizer types found to have zero_grad() and step() (checked once per type).
_STEPPABLE: set[type] = {torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW}

Models = Mapping[str, torch.nn.Module]
Optimizers = Mapping[str, torch.optim.Optimizer]


@contextlib.contextmanager
def torch_autocast(enabled: bool = True) -> Iterator[None]:
    """Run the block under CUDA autocast when ``enabled`` and CUDA is available.

    Without CUDA (or with ``enabled=False``) the block runs unchanged. For autocast on
    another device use ``torch.autocast(device_type, ...)``, or the ``"autocast"`` option of
    :class:`Logic`.

    Args:
        enabled: Whether to enable autocast.

    Example:
        >>> with ppe.handler.torch_autocast():
        ...     y = model(x)
    """
    if enabled and torch.cuda.is_available():
        with torch.autocast("cuda"):
            yield
    else:
        yield


def _type_name(obj: object) -> str:
    cls = type(obj)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


class BaseLogic:
    """Base class of logics: the callbacks that define training and evaluation steps.

    A logic is driven by a :class:`~pytorch_pfn_extras.handler.Handler` on behalf of the
    trainer and the evaluator; subclass it (or :class:`Logic`) to write steps that one model
    and one optimizer do not cover, such as a GAN's. Options are consumed (popped) from the
    dict given to :meth:`consume_options`; the engine reports the keys nobody consumed.

    Args:
        options: Options for the logic (see :meth:`consume_options`).
    """

    run_state: RunState | None = None
    """Where the trainer's run stands (its epoch length); given by the handler when training
    starts, ``None`` before (and outside a trainer)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.consume_options(dict(options) if options else {})

    def consume_options(self, options: dict[str, Any]) -> None:
        """Update the logic's options, popping the keys it uses from ``options``.

        Args:
            options: The options; the keys this logic understands are removed.
        """

    def train_epoch_begin(self, models: Models, epoch: int, loader: Any) -> None:
        """Called when a training epoch starts.

        Args:
            models: The models, by name.
            epoch: The number of completed epochs.
            loader: The training loader.
        """

    def train_epoch_end(self, models: Models, epoch: int) -> None:
        """Called when a training epoch completes.

        Args:
            models: The models, by name.
            epoch: The number of completed epochs.
        """

    def train_step(self, models: Models, optimizers: Optimizers, batch_idx: int, batch: Any) -> Any:
        """Run the forward and backward passes of one training step.

        Args:
            models: The models, by name.
            optimizers: The optimizers, by name.
            batch_idx: Index of the batch within the epoch.
            batch: The batch, already on the device.

        Returns:
            The outputs of the step (reported, passed to metrics and extensions).
        """
        message = f"{type(self).__qualname__} must implement train_step()"
        raise NotImplementedError(message)

    def train_step_optimizers(self, models: Models, optimizers: Optimizers, batch_idx: int) -> None:
        """Step the optimizers after :meth:`train_step` (the default does nothing).

        Args:
            models: The models, by name.
            optimizers: The optimizers, by name.
            batch_idx: Index of the batch within the epoch.
        """

    def train_validation_begin(self, models: Models) -> None:
        """Called before a validation run during training.

        Args:
            models: The evaluator's models, by name.
        """

    def train_validation_end(self, models: Models) -> None:
        """Called after a validation run during training.

        Args:
            models: The trainer's models, by name.
        """

    def eval_step(self, models: Models, batch_idx: int, batch: Any) -> Any:
        """Run one evaluation step (the evaluator already disabled gradients).

        Args:
            models: The models, by name.
            batch_idx: Index of the batch.
            batch: The batch, already on the device.

        Returns:
            The outputs of the step.
        """
        message = f"{type(self).__qualname__} must implement eval_step()"
        raise NotImplementedError(message)


def _named(objects: Mapping[str, Any], name: str, kind: str, logic: object) -> Any:
    found = objects.get(name)
    if found is None:
        message = (
            f"{type(logic).__name__} uses the {kind} {name!r}, but the {kind}s are "
            f"{sorted(objects)}; pass model_name= to the logic, or name the model and its "
            f"optimizer {name!r}"
        )
        raise KeyError(message)
    return found


class ModelLogic(BaseLogic):
    """Base of the logics that train one model with the optimizer of the same name.

    Puts the model in training mode (and tells a distributed sampler the epoch) when an epoch
    begins, and in evaluation mode around validations.

    Args:
        model_name: The name of the model (and of its optimizer) in the engines' dicts.
        options: Options for the logic (see :meth:`consume_options`).
    """

    def __init__(self, model_name: str = "main", options: dict[str, Any] | None = None) -> None:
        if not isinstance(model_name, str):
            message = f"model_name must be a string, got {model_name!r}"
            raise TypeError(message)
        self.model_name = model_name
        super().__init__(options)

    def _model(self, models: Models) -> torch.nn.Module:
        model: torch.nn.Module = _named(models, self.model_name, "model", self)
        return model

    def _optimizer(self, optimizers: Optimizers) -> torch.optim.Optimizer:
        """The optimizer of the model, to be stepped: it needs ``zero_grad()`` and ``step()``."""
        optimizer: torch.optim.Optimizer = _named(optimizers, self.model_name, "optimizer", self)
        if type(optimizer) not in _STEPPABLE:
            check_optimizer(optimizer, f"optimizer {self.model_name!r}", ("zero_grad", "step"))
            _STEPPABLE.add(type(optimizer))
        return optimizer

    def train_epoch_begin(self, models: Models, epoch: int, loader: Any) -> None:
        """Put the model in training mode and tell a distributed sampler the epoch."""
        self._model(models).train()
        sampler = getattr(loader, "sampler", None)
        set_epoch = getattr(sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def train_validation_begin(self, models: Models) -> None:
        """Put the model in evaluation mode."""
        self._model(models).eval()

    def train_validation_end(self, models: Models) -> None:
        """Put the model back in training mode."""
        self._model(models).train()
