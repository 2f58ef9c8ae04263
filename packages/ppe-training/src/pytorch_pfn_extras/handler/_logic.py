"""The default logics: forward, backward and optimizer step of one model."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from pytorch_pfn_extras.handler._logic_base import (
    ModelLogic,
    Models,
    Optimizers,
    _type_name,
)
from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.runtime import call_with_batch

_NO_CONTEXT: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def _autocast_options(value: Any) -> dict[str, Any] | None:
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, Mapping):
        options = dict(value)
        return options if options.get("enabled", True) else None
    message = (
        f"the 'autocast' option must be a bool or a dict of torch.autocast arguments, got {value!r}"
    )
    raise TypeError(message)


def _grad_clip_options(value: Any) -> dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, Mapping)):
        message = (
            "the 'grad_clip' option must be a max norm (a number) or a dict with 'max_norm' "
            f"(and optionally 'norm_type') or 'clip_value', got {value!r}"
        )
        raise TypeError(message)
    options = {"max_norm": float(value)} if not isinstance(value, Mapping) else dict(value)
    keys = set(options)
    if keys not in ({"max_norm"}, {"max_norm", "norm_type"}, {"clip_value"}):
        message = (
            "the 'grad_clip' option takes either 'max_norm' (with an optional 'norm_type') or "
            f"'clip_value', got the keys {sorted(keys)}"
        )
        raise ValueError(message)
    for key, number in options.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number <= 0:
            message = f"grad_clip[{key!r}] must be a positive number, got {number!r}"
            raise ValueError(message)
    return {key: float(number) for key, number in options.items()}


def _positive_int(value: Any, name: str) -> int:
    if not is_int(value) or value < 1:
        message = f"the {name!r} option must be a positive integer, got {value!r}"
        raise ValueError(message)
    return value


class Logic(ModelLogic):
    """The default logic: one model, one optimizer, forward / backward / step.

    The model takes the batch (a dict as keyword arguments, a tuple or list as positional
    arguments, anything else as the only argument) and returns its outputs, usually a dict
    holding the loss: the logic backpropagates from the outputs, and the optimizer steps.

    Args:
        model_name: The name of the model (and of its optimizer) in the trainer's dicts.
        options: The options (unknown keys are left for the engine to reject):

            * ``"backward_outputs"`` (list of str): the outputs to backpropagate from; a
              name the model did not return is skipped with a warning. By default every
              output computed with gradients (a ``grad_fn``) of one floating-point or
              complex element (or the output itself when the model returns such a tensor).
            * ``"autocast"`` (bool or dict): run the forward pass under ``torch.autocast``;
              ``True`` uses the model's device type, a dict is passed to ``torch.autocast``.
            * ``"grad_scaler"`` (``torch.amp.GradScaler``): scale the losses and step the
              optimizer through the scaler (saved in snapshots by the trainer).
            * ``"backward_function"`` (callable): called as ``fn(output)`` instead of
              ``output.backward()`` for each output backpropagated from.
            * ``"grad_accumulation_steps"`` (int): step the optimizer every N batches; each
              loss is divided by the number of batches of its window, so that a window's
              gradient is their mean. The last window of an epoch may be shorter and is
              stepped at the epoch's last batch.
            * ``"grad_clip"`` (number or dict): clip the gradients before each optimizer
              step: a number or ``{"max_norm": x, "norm_type": p}`` clips the total norm
              (``torch.nn.utils.clip_grad_norm_``), ``{"clip_value": x}`` each element.
              With a grad scaler, gradients are unscaled first.
            * ``"compile"`` (bool or dict): run the model through ``torch.compile`` (a dict
              is passed as its keyword arguments). Parameters are shared with the model.

    Example:
        >>> logic = ppe.handler.Logic(options={"backward_outputs": ["loss"]})
        >>> trainer = ppe.engine.create_trainer(model, optimizer, 10, logic=logic)
    """

    def __init__(self, model_name: str = "main", options: dict[str, Any] | None = None) -> None:
        self.backward_outputs: list[str] | None = None
        self._autocast: dict[str, Any] | None = None
        self._grad_scaler: Any = None
        self._backward_fn: Callable[[torch.Tensor], Any] | None = None
        self._accumulation = 1
        self._grad_clip: dict[str, float] | None = None
        self._compile: dict[str, Any] | None = None
        self._compiled: dict[int, Callable[..., Any]] = {}
        super().__init__(model_name, options)

    def consume_options(self, options: dict[str, Any]) -> None:
        """Pop this logic's options (see the class documentation) from ``options``.

        Options already set and absent from ``options`` keep their value.

        Raises:
            TypeError: An option has the wrong type.
            ValueError: An option has an invalid value.
        """
        super().consume_options(options)
        if "backward_outputs" in options:
            outputs = options.pop("backward_outputs")
            if isinstance(outputs, str):
                outputs = [outputs]
            if outputs is not None and (
                not isinstance(outputs, Sequence) or not all(isinstance(k, str) for k in outputs)
            ):
                message = (
                    f"the 'backward_outputs' option must be a list of output names, got {outputs!r}"
                )
                raise TypeError(message)
            self.backward_outputs = None if outputs is None else list(outputs)
        if "autocast" in options:
            self._autocast = _autocast_options(options.pop("autocast"))
        if "grad_scaler" in options:
            scaler = options.pop("grad_scaler")
            if scaler is not None and not all(
                callable(getattr(scaler, name, None)) for name in ("scale", "step", "update")
            ):
                message = f"the 'grad_scaler' option must be a torch.amp.GradScaler, got {_type_name(scaler)}"
                raise TypeError(message)
            self._grad_scaler = scaler
        if "backward_function" in options:
            function = options.pop("backward_function")
            if function is not None and not callable(function):
                message = (
                    f"the 'backward_function' option must be callable, got {_type_name(function)}"
                )
                raise TypeError(message)
            self._backward_fn = function
        if "grad_accumulation_steps" in options:
            self._accumulation = _positive_int(
                options.pop("grad_accumulation_steps"), "grad_accumulation_steps"
            )
        if "grad_clip" in options:
            self._grad_clip = _grad_clip_options(options.pop("grad_clip"))
        if "compile" in options:
            value = options.pop("compile")
            if value is True:
                self._compile = {}
            elif value is False or value is None:
                self._compile = None
            elif isinstance(value, Mapping):
                self._compile = dict(value)
            else:
                message = f"the 'compile' option must be a bool or a dict of torch.compile arguments, got {value!r}"
                raise TypeError(message)
            self._compiled.clear()

    @property
    def grad_scaler(self) -> Any:
        """The ``"grad_scaler"`` option, or ``None``."""
        return self._grad_scaler

    # ------------------------------------------------------------------ helpers

    def _forward(self, model: torch.nn.Module, batch: Any) -> Any:
        function: Callable[..., Any] = model
        if self._compile is not None:
            compiled = self._compiled.get(id(model))
            if compiled is None:
                compiled = torch.compile(model, **self._compile)
                self._compiled[id(model)] = compiled
            function = compiled
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple is one input
            return function(batch)
        return call_with_batch(function, batch)

    def _autocast_context(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        if self._autocast is None:
            return _NO_CONTEXT
        options = dict(self._autocast)
        if "device_type" not in options:
            options["device_type"] = _device_type(model)
        return torch.autocast(**options)

    def _losses(self, outputs: Any) -> list[torch.Tensor]:
        if self.backward_outputs is not None:
            if not isinstance(outputs, Mapping):
                message = (
                    f"backward_outputs={self.backward_outputs!r} needs the model to return a "
                    f"dict, got {_type_name(outputs)}"
                )
                raise ValueError(message)
            losses = []
            for key in self.backward_outputs:
                if key in outputs:
                    losses.append(outputs[key])
                else:  # PPE goes on without it
                    message = f"Couldn't find requested backward value: {key} in {outputs.keys()}"
                    warnings.warn(message, UserWarning, stacklevel=4)
            return losses
        if isinstance(outputs, torch.Tensor):
            values: Any = (outputs,)
        elif isinstance(outputs, Mapping):
            values = outputs.values()
        elif isinstance(outputs, (list, tuple)):
            values = outputs
        else:
            return []
        return [value for value in values if _is_loss(value)]

    def _window(self, batch_idx: int) -> tuple[int, int]:
        """Return (first batch index, length) of the accumulation window of ``batch_idx``."""
        steps = self._accumulation
        start = batch_idx - batch_idx % steps
        length = steps
        # The epoch's last window is shorter when the epoch length is not a multiple.
        epoch_length = self.run_state.epoch_length if self.run_state is not None else None
        if epoch_length is not None and start + steps > epoch_length:
            length = max(epoch_length - start, 1)
        return start, length

    def _backward(self, outputs: Any, batch_idx: int = 0) -> list[torch.Tensor]:
        """Backpropagate from the outputs' losses; return the losses (unscaled)."""
        losses = self._losses(outputs)
        if not losses and self.backward_outputs is None:
            message = (
                "nothing to backpropagate from: the model returned no one-element "
                "floating-point tensor computed with gradients (a grad_fn); return the loss, "
                "or name it with the 'backward_outputs' option"
            )
            raise ValueError(message)
        if not losses:
            return losses
        scaled = losses
        if self._accumulation > 1:
            _, length = self._window(batch_idx)
            scaled = [loss / length for loss in scaled]
        if self._grad_scaler is not None:
            scaled = [self._grad_scaler.scale(loss) for loss in scaled]
        if self._backward_fn is not None:
            for loss in scaled:
                self._backward_fn(loss)
        else:
            torch.autograd.backward(scaled)
        return losses

    def _clip(self, optimizer: torch.optim.Optimizer) -> None:
        clip = self._grad_clip
        if clip is None:
            return
        if self._grad_scaler is not None:
            self._grad_scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if "clip_value" in clip:
            torch.nn.utils.clip_grad_value_(params, clip["clip_value"])
        else:
            torch.nn.utils.clip_grad_norm_(
                params, clip["max_norm"], norm_type=clip.get("norm_type", 2.0)
            )

    def _step(self, optimizer: torch.optim.Optimizer) -> None:
        self._clip(optimizer)
        if self._grad_scaler is not None:
            self._grad_scaler.step(optimizer)
            self._grad_scaler.update()
        else:
            optimizer.step()

    # ------------------------------------------------------------------ callbacks

    def train_epoch_begin(self, models: Models, epoch: int, loader: Any) -> None:
        """Put the model in training mode and tell a distributed sampler the epoch.

        Raises:
            ValueError: The grad scaler cannot work on the model's device.
        """
        if self._grad_scaler is not None:
            check_grad_scaler(self._grad_scaler, _device_type(self._model(models)))
        super().train_epoch_begin(models, epoch, loader)

    def train_epoch_end(self, models: Models, epoch: int) -> None:
        """Nothing to do at the end of an epoch."""

    def train_step(self, models: Models, optimizers: Optimizers, batch_idx: int, batch: Any) -> Any:
        """Clear the gradients (at the start of an accumulation window), run the model under
        autocast if enabled, and backpropagate from its outputs.

        Returns:
            The model's outputs.
        """
        model = self._model(models)
        if self._accumulation == 1 or self._window(batch_idx)[0] == batch_idx:
            self._optimizer(optimizers).zero_grad()
        with self._autocast_context(model):
            outputs = self._forward(model, batch)
        self._backward(outputs, batch_idx)
        return outputs

    def train_step_optimizers(self, models: Models, optimizers: Optimizers, batch_idx: int) -> None:
        """Step the optimizer (through the grad scaler, after clipping), at the end of each
        accumulation window."""
        if self._accumulation > 1:
            start, length = self._window(batch_idx)
            if batch_idx != start + length - 1:
                return
        self._step(self._optimizer(optimizers))

    def eval_step(self, models: Models, batch_idx: int, batch: Any) -> Any:
        """Run the model on the batch (under autocast if enabled).

        Returns:
            The model's outputs.
        """
        model = self._model(models)
        with self._autocast_context(model):
            return self._forward(model, batch)


def _is_loss(value: Any) -> bool:
    """Whether the logic backpropagates from an output by default, as PPE does: a tensor
    computed with gradients (it has a ``grad_fn``) of one floating-point or complex element."""
    # ``requires_grad and not is_leaf`` is ``grad_fn is not None`` without building the
    # Python object of the node (a microsecond per step: benchmarks/loop_overhead.py).
    return (
        isinstance(value, torch.Tensor)
        and value.requires_grad
        and not value.is_leaf
        and value.numel() == 1
        and (value.is_floating_point() or value.is_complex())
    )


def check_grad_scaler(scaler: Any, device_type: str) -> None:
    scaler_device = getattr(scaler, "_device", None)  # set by torch.amp.GradScaler
    if isinstance(scaler_device, str) and scaler_device != device_type:
        message = (
            f"the grad_scaler was created for device type {scaler_device!r} but the model is on "
            f"{device_type!r}; create it with torch.amp.GradScaler({device_type!r})"
        )
        raise ValueError(message)
    is_enabled = getattr(scaler, "is_enabled", None)
    if callable(is_enabled) and not is_enabled():
        message = (
            f"the grad_scaler is disabled (a GradScaler for {scaler_device!r} made where that "
            "device has no AMP support disables itself), so it would do nothing; create it for "
            f"the model's device: torch.amp.GradScaler({device_type!r}), or drop the option"
        )
        raise ValueError(message)


def _device_type(model: torch.nn.Module) -> str:
    for parameter in model.parameters():
        return parameter.device.type
    for buffer in model.buffers():
        return buffer.device.type
    return "cuda" if torch.cuda.is_available() else "cpu"


class ClousureLogic(Logic):
    """A logic for optimizers whose ``step`` takes a closure (``torch.optim.LBFGS``).

    The closure clears the gradients, runs the model and backpropagates; the optimizer calls
    it as often as it needs. The step's outputs are those of the closure's first call (before
    the update). (The name keeps PPE's spelling.)

    Args:
        model_name: The name of the model (and of its optimizer).
        options: As for :class:`Logic`, without ``"grad_scaler"`` and
            ``"grad_accumulation_steps"``, which a closure step cannot use.

    Raises:
        ValueError: A grad scaler or gradient accumulation was asked for.
    """

    def consume_options(self, options: dict[str, Any]) -> None:
        """Pop :class:`Logic`'s options; refuse those a closure step cannot use."""
        super().consume_options(options)
        if self._grad_scaler is not None:
            message = "ClousureLogic cannot use a 'grad_scaler': GradScaler does not support closure steps"
            raise ValueError(message)
        if self._accumulation != 1:
            message = (
                "ClousureLogic cannot accumulate gradients: each closure step is a full update"
            )
            raise ValueError(message)

    def train_step(self, models: Models, optimizers: Optimizers, batch_idx: int, batch: Any) -> Any:
        """Step the optimizer with a closure that runs forward and backward.

        Returns:
            The model's outputs from the closure's first call.
        """
        model = self._model(models)
        optimizer = self._optimizer(optimizers)
        first: list[Any] = []

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            with self._autocast_context(model):
                outputs = self._forward(model, batch)
            losses = self._backward(outputs, batch_idx)
            self._clip(optimizer)
            if not first:
                first.append(outputs)
            total = torch.zeros(()) if not losses else losses[0].detach()
            for loss in losses[1:]:
                total = total + loss.detach()
            return total

        optimizer.step(closure)  # type: ignore[arg-type]  # LBFGS takes a tensor loss
        return first[0] if first else None

    def train_step_optimizers(self, models: Models, optimizers: Optimizers, batch_idx: int) -> None:
        """Nothing: the optimizer stepped inside :meth:`train_step`."""
